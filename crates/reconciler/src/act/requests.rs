//! Every request the operator sends, counted by verb and response code
//! (`homestead_api_requests_total{verb, code}`): a [`tower::Layer`] under the client's whole
//! stack, so reads, watches and writes (the fenced client's, the leader election's, the
//! Events') all pass it once. What it shows that the API server's own metrics do not, from the
//! operator's side: its request rate by kind, the 429s of API Priority and Fairness, the
//! conflicts of optimistic concurrency, and requests that never got an answer (`error`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use prometheus::IntCounterVec;

/// A boxed error, as tower services return them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The [`tower::Layer`] that counts each request in `homestead_api_requests_total`.
#[derive(Clone)]
pub struct CountRequests(IntCounterVec);

impl CountRequests {
    /// Counts into `requests`, a counter vector with the labels `verb` and `code`.
    pub fn new(requests: IntCounterVec) -> Self {
        Self(requests)
    }
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.0.clone(),
        }
    }
}

/// The service [`CountRequests`] wraps around the client's stack.
pub struct Counted<S> {
    inner: S,
    requests: IntCounterVec,
}

/// The Kubernetes verb of `request`, as far as its method and query tell (a list is a `get`
/// here: telling it from a get by name takes knowing the resource's path): `watch` for a GET
/// with `watch=true` or `watch=1`, else `get`, `create` (POST), `update` (PUT), `patch`,
/// `delete`, or `other`.
pub fn verb_of<B>(request: &Request<B>) -> &'static str {
    match *request.method() {
        Method::GET => {
            let watch = request.uri().query().is_some_and(|query| {
                query
                    .split('&')
                    .any(|pair| pair == "watch=true" || pair == "watch=1")
            });
            if watch { "watch" } else { "get" }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

impl<S, B, RB> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb_of(&request);
        let requests = self.requests.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await.map_err(Into::into);
            let code = match &answer {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "error".to_owned(),
            };
            requests.with_label_values(&[verb, &code]).inc();
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;
    use tower::{Layer as _, ServiceExt as _};

    fn request(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[test]
    fn the_verb_comes_from_the_method_and_a_watch_from_its_query() {
        let users = "/apis/homestead.dev/v1alpha1/users";
        assert_eq!(verb_of(&request(Method::GET, users)), "get");
        assert_eq!(
            verb_of(&request(
                Method::GET,
                &format!("{users}?watch=true&resourceVersion=7")
            )),
            "watch"
        );
        assert_eq!(
            verb_of(&request(
                Method::GET,
                &format!("{users}?resourceVersion=7&watch=1")
            )),
            "watch"
        );
        assert_eq!(
            verb_of(&request(Method::GET, &format!("{users}?watch=false"))),
            "get"
        );
        assert_eq!(
            verb_of(&request(
                Method::GET,
                &format!("{users}?allowWatchBookmarks=true")
            )),
            "get"
        );
        assert_eq!(verb_of(&request(Method::POST, users)), "create");
        assert_eq!(verb_of(&request(Method::PUT, users)), "update");
        assert_eq!(verb_of(&request(Method::PATCH, users)), "patch");
        assert_eq!(verb_of(&request(Method::DELETE, users)), "delete");
        assert_eq!(verb_of(&request(Method::OPTIONS, users)), "other");
    }

    #[tokio::test]
    async fn each_answer_is_counted_by_verb_and_code_and_a_failure_as_error() {
        let requests = IntCounterVec::new(Opts::new("t", "t"), &["verb", "code"]).unwrap();
        let layer = CountRequests::new(requests.clone());
        // An API server that answers a PATCH with 429 and fails a DELETE before any answer.
        let server = tower::service_fn(|request: Request<()>| async move {
            match *request.method() {
                Method::DELETE => Err::<Response<()>, BoxError>("connection reset".into()),
                Method::PATCH => Ok(Response::builder().status(429).body(()).unwrap()),
                _ => Ok(Response::new(())),
            }
        });
        let send = |method, uri| layer.layer(server).oneshot(request(method, uri));
        let patched = send(Method::PATCH, "/api/v1/namespaces/x").await;
        assert_eq!(patched.unwrap().status(), 429);
        assert!(send(Method::DELETE, "/api/v1/namespaces/x").await.is_err());
        send(Method::GET, "/api/v1/namespaces?watch=true")
            .await
            .unwrap();
        assert_eq!(requests.with_label_values(&["patch", "429"]).get(), 1);
        assert_eq!(requests.with_label_values(&["delete", "error"]).get(), 1);
        assert_eq!(requests.with_label_values(&["watch", "200"]).get(), 1);
        assert_eq!(requests.with_label_values(&["get", "200"]).get(), 0);
    }
}
