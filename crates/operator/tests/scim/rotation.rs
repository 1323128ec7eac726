//! The service's credentials: a rotated bearer token and TLS certificate take effect without a
//! restart.

use super::*;

#[tokio::test]
async fn a_rotated_token_and_certificate_take_effect_without_a_restart() {
    install_scim_identity();
    let plane = env().plane;
    let dir = plane.dir().join("scim-rotation");
    let (old, new) = (dir.join("old"), dir.join("new"));
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    // Certificates valid until 2036-01-01 and 2031-06-01 (midnight UTC): their expiry, in Unix
    // seconds, is what /metrics must say while each is in force.
    let old = homestead_testenv::scim_credentials_until(&old, Some((2036, 1, 1))).unwrap();
    let new = homestead_testenv::scim_credentials_until(&new, Some((2031, 6, 1))).unwrap();
    const OLD_EXPIRES: &str = "2082758400";
    const NEW_EXPIRES: &str = "1938038400";
    let read = |path: &Path| std::fs::read_to_string(path).unwrap().trim().to_owned();
    let (old_token, new_token) = (read(&old.token), read(&new.token));
    // The files the service is given; the test rewrites them as a Secret rotation would.
    let (token_file, cert_file, key_file) =
        (dir.join("token"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(&old.token, &token_file).unwrap();
    std::fs::copy(&old.cert, &cert_file).unwrap();
    std::fs::copy(&old.key, &key_file).unwrap();
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let kubeconfig = plane
        .write_kubeconfig(SCIM, &dir.join("scim.kubeconfig"))
        .unwrap();
    let service = plane
        .spawn(
            "scim-rotation",
            Path::new(env!("CARGO_BIN_EXE_homestead")),
            &[
                "--log-format=text".to_owned(),
                "scim".to_owned(),
                format!("--address={address}"),
                format!("--token-file={}", token_file.display()),
                format!("--tls-cert={}", cert_file.display()),
                format!("--tls-key={}", key_file.display()),
                "--reload-interval=1s".to_owned(),
            ],
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("RUST_LOG", "info".to_owned()),
            ],
        )
        .unwrap();
    let get = |ca: &Path, token: &str| https_get(&address, ca, "/scim/v2/Users", token);
    // homestead_scim_certificate_expiry_timestamp_seconds, as /metrics (no token) says it.
    let expiry = |ca: &Path| {
        let (code, body) = https_request(&address, ca, "GET", "/metrics", "", None).ok()?;
        assert_eq!(code, 200, "{body}");
        body.lines()
            .find_map(|l| l.strip_prefix("homestead_scim_certificate_expiry_timestamp_seconds "))
            .map(str::to_owned)
    };

    eventually("the SCIM service to serve the first token", 60, || async {
        (get(&old.ca, &old_token) == Ok(200)).then_some(())
    })
    .await;
    assert_eq!(get(&old.ca, &new_token), Ok(401));
    assert_eq!(expiry(&old.ca).as_deref(), Some(OLD_EXPIRES));

    // The Secret's token is rotated: the new one is accepted, the old one no longer is.
    replace_file(&token_file, format!("{new_token}\n").as_bytes());
    eventually("the rotated token to be accepted", 30, || async {
        (get(&old.ca, &new_token) == Ok(200)).then_some(())
    })
    .await;
    assert_eq!(get(&old.ca, &old_token), Ok(401));

    // A token file caught mid-rewrite (empty) keeps the tokens in force.
    replace_file(&token_file, b"\n");
    logged(&service, "holds no token; keeping the previous tokens").await;
    assert_eq!(get(&old.ca, &new_token), Ok(200));

    // The certificate is rotated to one from another CA: clients that trust only the old CA
    // now fail the handshake, clients that trust the new one get through.
    replace_file(&key_file, &std::fs::read(&new.key).unwrap());
    replace_file(&cert_file, &std::fs::read(&new.cert).unwrap());
    eventually("the rotated certificate to be served", 30, || async {
        (get(&new.ca, &new_token) == Ok(200)).then_some(())
    })
    .await;
    let refused = get(&old.ca, &new_token);
    assert!(refused.is_err(), "the old CA still verifies: {refused:?}");
    assert_eq!(expiry(&new.ca).as_deref(), Some(NEW_EXPIRES));

    // A certificate that does not load keeps the one in force.
    replace_file(&cert_file, b"not a certificate");
    logged(&service, "does not load; keeping the previous one").await;
    assert_eq!(get(&new.ca, &new_token), Ok(200));
    assert_eq!(expiry(&new.ca).as_deref(), Some(NEW_EXPIRES));
}
