//! gRPC status codes as gRPC's conventions name them, where tonic names a client's error
//! otherwise: an over-size message is RESOURCE_EXHAUSTED, bytes that are no message of the
//! method's type INVALID_ARGUMENT.
//!
//! ```text
//!   every response ── standard_status_codes (a tower layer) ── grpc-status rewritten
//!   a stream's failed request read ── request_error ──> the status the stream ends with
//! ```
//!
//! Non-goals: the services' own statuses (each service says why, with the right code).

pub(crate) type MapResponse =
    fn(http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body>;

/// tonic answers a request it cannot take with a status gRPC's conventions name otherwise: one
/// over the message size limit with OUT_OF_RANGE, where grpc-go and grpc-java send
/// RESOURCE_EXHAUSTED (and clients handle it as such), and bytes that are no message of the
/// method's type with INTERNAL, which is the client's error: INVALID_ARGUMENT. This layer
/// rewrites the status of such answers (the message, saying why, stays).
pub(crate) fn standard_status_codes(
    mut res: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let h = res.headers();
    let (Some(code), Some(message)) = (h.get("grpc-status"), h.get("grpc-message")) else {
        return res;
    };
    let code = std::str::from_utf8(code.as_bytes())
        .ok()
        .and_then(|c| c.parse::<i32>().ok())
        .map(tonic::Code::from);
    let status = code.map(|c| tonic::Status::new(c, String::from_utf8_lossy(message.as_bytes())));
    if let Some(mapped) = status.and_then(client_error) {
        let value = http::HeaderValue::from(mapped.code() as i32);
        res.headers_mut().insert("grpc-status", value);
    }
    res
}

/// The status a request error should have been (see [`standard_status_codes`]), if it is one
/// tonic names otherwise.
fn client_error(status: tonic::Status) -> Option<tonic::Status> {
    let text = status.message().replace("%20", " ");
    match status.code() {
        tonic::Code::OutOfRange if text.contains("message length too large") => {
            Some(tonic::Status::resource_exhausted(text))
        }
        tonic::Code::Internal if text.contains("failed to decode Protobuf message") => {
            Some(tonic::Status::invalid_argument(text))
        }
        _ => None,
    }
}

/// The status a stream forwards for a failed request read (see [`standard_status_codes`]).
pub(crate) fn request_error(status: tonic::Status) -> tonic::Status {
    client_error(status.clone()).unwrap_or(status)
}
