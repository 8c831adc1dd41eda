//! Reading cargo's JSON (`--message-format=json` lines, `cargo metadata`) with serde_json.

pub use serde_json::Value as Json;

/// Parses one JSON document; the error says what was wrong with it.
pub fn parse(text: &str) -> Result<Json, String> {
    serde_json::from_str(text).map_err(|e| format!("cannot read cargo's JSON output: {e}"))
}
