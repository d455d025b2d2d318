//! Who may call: the client's token (checked on every request) and the session secret a call
//! carries, both compared in constant time.

use tonic::{Request, Status};

/// The session secret a call carries.
pub(crate) fn session_key<T>(req: &Request<T>) -> Option<String> {
    req.metadata().get(omp_remote_proto::SESSION_KEY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Compares secrets in constant time (in the expected secret's length).
pub(crate) fn same_secret(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.iter().zip(b).fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y)) == 0
}

/// Checks the client's token (constant time in the token's length).
pub fn check_token(expected: Option<&str>, req: &Request<()>) -> Result<(), Status> {
    let Some(expected) = expected else { return Ok(()) };
    let given = req.metadata().get(omp_remote_proto::AUTH_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
    let Some(given) = given.strip_prefix("Bearer ") else {
        return Err(Status::unauthenticated(
            "this server requires a token (LIBOMPTARGET_RPC_TOKEN or LIBOMPTARGET_RPC_TOKEN_FILE)",
        ));
    };
    if !same_secret(given, expected) {
        return Err(Status::unauthenticated("wrong token"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        let mut r = Request::new(());
        assert!(check_token(None, &r).is_ok());
        assert_eq!(check_token(Some("abc"), &r).unwrap_err().code(), tonic::Code::Unauthenticated);
        r.metadata_mut().insert("authorization", "Bearer abd".parse().unwrap());
        assert!(check_token(Some("abc"), &r).is_err());
        r.metadata_mut().insert("authorization", "Bearer abc".parse().unwrap());
        assert!(check_token(Some("abc"), &r).is_ok());
        assert!(check_token(Some("abcd"), &r).is_err());
    }
}
