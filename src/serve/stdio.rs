//! The stdio transport's front door. Every line a client sends is checked
//! before rmcp reads it, so a malformed or invalid message gets its JSON-RPC
//! 2.0 error at once (`"id": null` where the id cannot be read; rmcp drops
//! unparseable lines and answers invalid ones without an id), and stdout
//! carries whole JSON-RPC lines only, from one writer.

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// Room for one large message in flight between the front and rmcp.
const PIPE_BYTES: usize = 1 << 20;

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// A valid message: rmcp handles it.
    Forward,
    /// Not answerable (a blank line, an invalid notification).
    Skip,
    /// Invalid: this error response goes back to the client.
    Answer(Value),
}

/// Checks one line as JSON-RPC 2.0 (a single message: MCP has no batches).
pub fn check(line: &[u8]) -> Verdict {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return answer(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: the line is not JSON ({e})"),
            )
        }
    };
    let Value::Object(message) = &value else {
        let what = if value.is_array() {
            "a batch (MCP takes one message per line)"
        } else {
            "not a JSON object"
        };
        return answer(Value::Null, INVALID_REQUEST, format!("Invalid Request: {what}"));
    };
    let id = message.get("id");
    let readable_id = id.filter(|i| i.is_string() || i.is_i64() || i.is_u64()).cloned();
    let method = message.get("method");
    let is_notification = method.is_some() && id.is_none();
    let reply_id = readable_id.clone().unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        if is_notification {
            return Verdict::Skip;
        }
        return answer(
            reply_id,
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\"".into(),
        );
    }
    if id.is_some() && readable_id.is_none() {
        return answer(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: `id` must be a string or an integer".into(),
        );
    }
    let Some(method) = method else {
        // A response to one of the server's requests (e.g. roots/list).
        if message.contains_key("result") || message.contains_key("error") {
            return Verdict::Forward;
        }
        return answer(
            reply_id,
            INVALID_REQUEST,
            "Invalid Request: no `method` (nor `result` or `error`)".into(),
        );
    };
    let Some(method) = method.as_str() else {
        return match is_notification {
            true => Verdict::Skip,
            false => answer(
                reply_id,
                INVALID_REQUEST,
                "Invalid Request: `method` must be a string".into(),
            ),
        };
    };
    if is_notification {
        // Never answered; rmcp ignores the ones it does not know.
        return Verdict::Forward;
    }
    let params = message.get("params");
    if params.is_some_and(|p| !p.is_object() && !p.is_null()) {
        return answer(
            reply_id,
            INVALID_PARAMS,
            format!("Invalid params: `params` of `{method}` must be an object"),
        );
    }
    if matches!(method, "tools/call" | "prompts/get")
        && !params.and_then(|p| p.get("name")).is_some_and(Value::is_string)
    {
        let listed = if method == "tools/call" {
            "tools/list"
        } else {
            "prompts/list"
        };
        return answer(
            reply_id,
            INVALID_PARAMS,
            format!("Invalid params: `{method}` needs `name` (a string; {listed} gives them)"),
        );
    }
    if method == "tools/call"
        && params
            .and_then(|p| p.get("arguments"))
            .is_some_and(|a| !a.is_object() && !a.is_null())
    {
        return answer(
            reply_id,
            INVALID_PARAMS,
            "Invalid params: `arguments` of `tools/call` must be an object".into(),
        );
    }
    // rmcp takes a standard method whose params do not fit for a custom
    // request, which it would answer "method not found".
    match serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value.clone()) {
        Ok(rmcp::model::JsonRpcMessage::Request(request))
            if matches!(request.request, rmcp::model::ClientRequest::CustomRequest(_))
                && STANDARD_METHODS.contains(&method) =>
        {
            answer(
                reply_id,
                INVALID_PARAMS,
                format!("Invalid params: the params of `{method}` do not match the MCP schema"),
            )
        }
        Ok(_) => Verdict::Forward,
        Err(e) => answer(reply_id, INVALID_PARAMS, format!("Invalid params for `{method}`: {e}")),
    }
}

/// The requests a client may send that MCP defines.
const STANDARD_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
];

fn answer(id: Value, code: i64, message: String) -> Verdict {
    Verdict::Answer(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

/// The two ends rmcp serves on, and the task that writes stdout (awaited at
/// the end so that no answer is lost).
pub struct Checked {
    pub reader: DuplexStream,
    pub writer: DuplexStream,
    pub stdout_done: tokio::task::JoinHandle<()>,
}

/// Starts the front door on the process's stdin and stdout.
pub fn checked_stdio() -> Checked {
    checked(tokio::io::stdin(), tokio::io::stdout())
}

/// Starts the front door on a client's byte streams (stdio, or a session of
/// the shared service).
pub fn checked(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> Checked {
    let (reader, mut feed) = tokio::io::duplex(PIPE_BYTES);
    let (writer, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (lines_out, mut outbox) = mpsc::unbounded_channel::<Vec<u8>>();
    let stdout_done = tokio::spawn(async move {
        let mut stdout = output;
        while let Some(mut line) = outbox.recv().await {
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
        let _ = stdout.shutdown().await;
    });
    let answers = lines_out.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        while lines.read_until(b'\n', &mut line).await.is_ok_and(|n| n > 0) {
            let text = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
            if lines_out.send(text).is_err() {
                break;
            }
            line.clear();
        }
    });
    tokio::spawn(async move {
        let mut stdin = BufReader::new(input);
        let mut line = Vec::new();
        while stdin.read_until(b'\n', &mut line).await.is_ok_and(|n| n > 0) {
            match check(&line) {
                Verdict::Forward => {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    if feed.write_all(&line).await.is_err() {
                        break;
                    }
                }
                Verdict::Skip => {}
                Verdict::Answer(error) => {
                    tracing::warn!("answered an invalid message: {}", error["error"]["message"]);
                    let _ = answers.send(error.to_string().into_bytes());
                }
            }
            line.clear();
        }
        // EOF: rmcp sees the client close.
        let _ = feed.shutdown().await;
    });
    Checked {
        reader,
        writer,
        stdout_done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(line: &str) -> (Value, i64) {
        match check(line.as_bytes()) {
            Verdict::Answer(v) => (v["id"].clone(), v["error"]["code"].as_i64().unwrap()),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn invalid_messages_get_their_json_rpc_errors_with_an_id_member() {
        assert_eq!(error_of("this is not json"), (Value::Null, PARSE_ERROR));
        assert_eq!(error_of("{\"jsonrpc\":\"2.0\",\"id\":1,"), (Value::Null, PARSE_ERROR));
        assert_eq!(error_of("[1,2]"), (Value::Null, INVALID_REQUEST));
        assert_eq!(error_of("42"), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            error_of(r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#),
            (json!(7), INVALID_REQUEST)
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#),
            (Value::Null, INVALID_REQUEST)
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"arguments":{}}}"#),
            (json!("x"), INVALID_PARAMS)
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1]}"#),
            (json!(3), INVALID_PARAMS)
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"nonsense":true}}"#),
            (json!(4), INVALID_PARAMS)
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"x","arguments":"q"}}"#),
            (json!(6), INVALID_PARAMS)
        );
        assert_eq!(error_of(r#"{"jsonrpc":"2.0","id":5}"#), (json!(5), INVALID_REQUEST));
    }

    #[test]
    fn valid_messages_and_notifications_pass() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"codebase_search","arguments":{"query":"x"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"some/unknown_notification","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":9,"result":{"roots":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"vendor/extension","params":{"x":1}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        ] {
            assert_eq!(check(line.as_bytes()), Verdict::Forward, "{line}");
        }
        assert_eq!(check(b"   \r\n"), Verdict::Skip);
        assert_eq!(check(br#"{"jsonrpc":"1.0","method":"x"}"#), Verdict::Skip);
    }
}
