//! SCIM error responses (RFC 7644 §3.12): a JSON body with the schema
//! `urn:ietf:params:scim:api:messages:2.0:Error`, the HTTP status as a string, a `scimType`
//! where the RFC defines one, and a `detail` for humans.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use scim_v2::models::errors::{ScimHttpError, ScimType};
use scim_v2::schema_urns;

/// The media type of every SCIM response body (RFC 7644 §3.1).
pub const SCIM_JSON: &str = "application/scim+json";

/// A request the SCIM service refuses or could not complete, answered as a SCIM error.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct ScimError {
    /// The HTTP status (400, 401, 404, 409, 413, 500, 501, ...).
    pub status: StatusCode,
    /// The RFC 7644 §3.12 `scimType` (only for 400 and 409, as the RFC defines them).
    pub scim_type: Option<ScimType>,
    /// What went wrong, for the person reading the identity provider's log.
    pub detail: String,
}

impl ScimError {
    /// A 503 with `Retry-After: 5` (RFC 9110 §10.2.3): the request will succeed once something
    /// in progress ends, e.g. a create for a person whose previous User is still being
    /// offboarded.
    pub fn retry_later(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            scim_type: None,
            detail: detail.into(),
        }
    }

    /// A 400 with `scimType` `kind`.
    pub fn bad_request(kind: ScimType, detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            scim_type: Some(kind),
            detail: detail.into(),
        }
    }

    /// A 400 `invalidValue`: an attribute is missing, malformed, or refused by the API server.
    pub fn invalid_value(detail: impl Into<String>) -> Self {
        Self::bad_request(ScimType::InvalidValue, detail)
    }

    /// A 404: no such resource (or endpoint).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            scim_type: None,
            detail: detail.into(),
        }
    }

    /// A 409 `uniqueness`: another User already has this `userName`.
    pub fn uniqueness(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            scim_type: Some(ScimType::Uniqueness),
            detail: detail.into(),
        }
    }

    /// A 401: no bearer token, or not one of the configured tokens.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            scim_type: None,
            detail: "a valid bearer token is required (Authorization: Bearer <token>)".into(),
        }
    }

    /// A 500: the API server failed or refused the service's own identity.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            scim_type: None,
            detail: detail.into(),
        }
    }

    /// The RFC 7644 §3.12 body of this error.
    pub fn body(&self) -> ScimHttpError {
        ScimHttpError {
            schemas: vec![schema_urns::ERROR.to_owned()],
            scim_type: self.scim_type.clone(),
            detail: Some(self.detail.clone()),
            status: self.status.as_u16().to_string(),
        }
    }

    /// Maps an API server error from a read or write of a User: 404 stays 404, 409
    /// AlreadyExists is `uniqueness`, 400/422 (schema and CEL validation) are `invalidValue`
    /// with the server's own message, 413 stays 413, anything else (403 included: the service's
    /// RBAC is wrong) is a 500 naming the server's answer.
    pub fn from_kube(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => match status.code {
                404 => Self::not_found(status.message),
                409 if status.reason == "AlreadyExists" => Self::uniqueness(status.message),
                400 | 422 => Self::invalid_value(status.message),
                413 => Self {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    scim_type: None,
                    detail: status.message,
                },
                code => Self::internal(format!(
                    "the Kubernetes API server answered {code} {}: {}",
                    status.reason, status.message
                )),
            },
            other => Self::internal(format!("talking to the Kubernetes API server: {other}")),
        }
    }
}

/// How long (s) a client asked to come back later ([`ScimError::retry_later`]) should wait.
pub const RETRY_AFTER_SECONDS: u64 = 5;

impl IntoResponse for ScimError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(SCIM_JSON));
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"homestead-scim\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_later_tells_when_to_retry() {
        let response = ScimError::retry_later("being offboarded").into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        assert_eq!(response.headers()[header::CONTENT_TYPE], SCIM_JSON);
    }
}
