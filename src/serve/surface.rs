//! What `ken serve` shows a client: which tools (chosen by presets), and
//! their schemas as standard, lean JSON Schema.
//!
//! Agents pay for every tool on every turn, so the default set is what an
//! agent needs per turn (find code, follow calls, see what the index
//! reflects); administration and knowledge-base management are a preset away.
//! schemars writes schemas for Rust types (`format: uint64`, `$schema`,
//! `"default": null`, `["string", "null"]` unions); clients validate with
//! stricter or older dialects that warn about or reject those, so they are
//! rewritten here, once, for every tool.

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use serde_json::{Map, Value};

/// Named groups of tools: (preset, tools, what for).
pub const PRESETS: &[(&str, &[&str], &str)] = &[
    (
        "search",
        &["codebase_search", "codebase_context", "codebase_peek", "find_similar"],
        "find code by meaning, keywords or identifier",
    ),
    (
        "graph",
        &[
            "call_graph",
            "call_graph_path",
            "symbol_context",
            "change_impact",
            "repo_map",
        ],
        "callers, callees, call paths, context for an edit, what a change affects, where to start",
    ),
    (
        "index",
        &["index_status", "index_codebase"],
        "what the index reflects; refresh it",
    ),
    (
        "admin",
        &["index_health_check", "index_metrics", "index_logs"],
        "health checks, counters, logs",
    ),
    (
        "kb",
        &["add_knowledge_base", "list_knowledge_bases", "remove_knowledge_base"],
        "manage knowledge bases (searching them needs none of these)",
    ),
];

/// The presets served when nothing is chosen.
pub const DEFAULT_PRESETS: &[&str] = &["search", "graph", "index"];

/// The tools `spec` selects from `all`: comma-separated items (several
/// arguments or config entries add up), each `default`, `all`, a preset, a
/// tool name, or one of those after `-` to leave it out.
pub fn select(spec: &[String], all: &[String]) -> Result<BTreeSet<String>> {
    let mut chosen = BTreeSet::new();
    let items: Vec<&str> = spec
        .iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() || items.iter().all(|i| i.starts_with('-')) {
        chosen.extend(expand("default", all)?);
    }
    for item in items {
        match item.strip_prefix('-') {
            Some(name) => {
                for tool in expand(name, all)? {
                    chosen.remove(&tool);
                }
            }
            None => chosen.extend(expand(item, all)?),
        }
    }
    if chosen.is_empty() {
        bail!("--tools {} leaves no tool to serve", spec.join(","));
    }
    Ok(chosen)
}

fn expand(item: &str, all: &[String]) -> Result<Vec<String>> {
    if item == "all" {
        return Ok(all.to_vec());
    }
    if item == "default" {
        return Ok(DEFAULT_PRESETS
            .iter()
            .flat_map(|p| preset(p).unwrap_or_default())
            .map(|t| t.to_string())
            .collect());
    }
    if let Some(tools) = preset(item) {
        return Ok(tools.iter().map(|t| t.to_string()).collect());
    }
    if all.iter().any(|t| t == item) {
        return Ok(vec![item.to_string()]);
    }
    let presets: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
    bail!(
        "unknown tool or preset `{item}`: use default, all, a preset ({}) or a tool ({})",
        presets.join(", "),
        all.join(", ")
    )
}

fn preset(name: &str) -> Option<&'static [&'static str]> {
    PRESETS.iter().find(|p| p.0 == name).map(|p| p.1)
}

/// Formats of JSON Schema itself (2020-12 and draft 7); schemars's numeric
/// ones (`uint64`, `int32`, `double`...) are not among them.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// An input schema as clients should see it: no `$schema` or title, no
/// non-standard formats, no `"default": null`, references inlined, and an
/// optional property typed as its value (not a union with null: absent is
/// how a caller leaves it out).
pub fn lean_input(schema: &Map<String, Value>) -> Map<String, Value> {
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = schema.clone();
    for key in ["$schema", "title", "$defs"] {
        out.remove(key);
    }
    let mut value = Value::Object(out);
    lean(&mut value, &defs, true);
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// An output schema: standard formats only, no `$schema`; nullable fields
/// stay nullable (results do carry nulls).
pub fn lean_output(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut out = schema.clone();
    out.remove("$schema");
    let mut value = Value::Object(out);
    lean(&mut value, &Map::new(), false);
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn lean(value: &mut Value, defs: &Map<String, Value>, input: bool) {
    match value {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            if map.get("default").is_some_and(Value::is_null) {
                map.remove("default");
            }
            if input {
                inline_reference(map, defs);
                drop_null_from_type(map);
                unwrap_nullable_any_of(map, defs);
                constants_as_enum(map);
            }
            for (key, child) in map.iter_mut() {
                // Property names are data, not schema keywords.
                if key == "properties" {
                    if let Value::Object(props) = child {
                        for prop in props.values_mut() {
                            lean(prop, defs, input);
                        }
                    }
                } else {
                    lean(child, defs, input);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| lean(v, defs, input)),
        _ => {}
    }
}

/// `{"$ref": "#/$defs/X", "description": ...}` becomes X with that description.
fn inline_reference(map: &mut Map<String, Value>, defs: &Map<String, Value>) {
    let Some(target) = map
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .and_then(Value::as_object)
    else {
        return;
    };
    map.remove("$ref");
    for (k, v) in target {
        if k != "title" {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// `"type": ["integer", "null"]` becomes `"type": "integer"`.
fn drop_null_from_type(map: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = map.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| t.as_str() != Some("null")).cloned().collect();
        let single = (kept.len() == 1).then(|| kept[0].clone());
        map.insert("type".into(), single.unwrap_or(Value::Array(kept)));
    }
    if let Some(Value::Array(options)) = map.get_mut("enum") {
        options.retain(|o| !o.is_null());
    }
}

/// `"anyOf": [X, {"type": "null"}]` becomes X.
fn unwrap_nullable_any_of(map: &mut Map<String, Value>, defs: &Map<String, Value>) {
    let Some(Value::Array(options)) = map.get("anyOf") else {
        return;
    };
    let non_null: Vec<&Value> = options
        .iter()
        .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
        .collect();
    if non_null.len() != 1 || non_null.len() == options.len() {
        return;
    }
    let Some(mut only) = non_null[0].as_object().cloned() else {
        return;
    };
    inline_reference(&mut only, defs);
    map.remove("anyOf");
    for (k, v) in only {
        if k != "title" {
            map.entry(k).or_insert(v);
        }
    }
}

/// `"oneOf": [{"const": "a", "description": ...}, ...]` (a documented Rust
/// enum) becomes `"enum": ["a", ...]`: the property's description names them.
fn constants_as_enum(map: &mut Map<String, Value>) {
    for key in ["oneOf", "anyOf"] {
        let Some(Value::Array(options)) = map.get(key) else {
            continue;
        };
        let constants: Option<Vec<Value>> = options.iter().map(|o| o.get("const").cloned()).collect();
        let Some(constants) = constants.filter(|c| !c.is_empty() && c.iter().all(Value::is_string)) else {
            continue;
        };
        map.remove(key);
        map.insert("type".into(), Value::from("string"));
        map.insert("enum".into(), Value::Array(constants));
    }
}

/// What a client's model reads of a tool: its name, description and input
/// schema, in characters of JSON.
pub fn model_facing_size(tool: &rmcp::model::Tool) -> usize {
    let description = tool.description.as_deref().unwrap_or_default();
    let schema = serde_json::to_string(tool.input_schema.as_ref()).unwrap_or_default();
    tool.name.len() + description.len() + schema.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all() -> Vec<String> {
        PRESETS.iter().flat_map(|p| p.1.iter()).map(|t| t.to_string()).collect()
    }

    #[test]
    fn presets_names_and_exclusions_add_up() {
        let default = select(&[], &all()).unwrap();
        assert!(default.contains("codebase_search") && default.contains("call_graph"));
        assert!(!default.contains("index_logs") && !default.contains("add_knowledge_base"));
        let more = select(&["default,kb".into()], &all()).unwrap();
        assert_eq!(more.len(), default.len() + 3);
        let fewer = select(&["-find_similar".into()], &all()).unwrap();
        assert_eq!(fewer.len(), default.len() - 1);
        assert!(!fewer.contains("find_similar"));
        assert_eq!(select(&["all".into()], &all()).unwrap().len(), all().len());
        assert_eq!(
            select(&["codebase_search".into()], &all()).unwrap(),
            BTreeSet::from(["codebase_search".to_string()])
        );
        let err = select(&["search,frobnicate".into()], &all()).unwrap_err().to_string();
        assert!(err.contains("frobnicate") && err.contains("admin"), "{err}");
        assert!(select(&["search,-search".into()], &all()).is_err());
    }

    #[test]
    fn input_schemas_become_standard_and_lean() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "SearchArgs",
            "type": "object",
            "properties": {
                "limit": {"description": "How many.", "type": ["integer", "null"], "format": "uint", "minimum": 1, "default": null},
                "mode": {"description": "Which side.", "anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "default": null},
                "level": {"description": "How loud.", "oneOf": [{"const": "warn", "description": "W.", "type": "string"}, {"const": "info", "type": "string"}]},
                "when": {"type": "string", "format": "date-time"},
                "properties": {"type": "string", "format": "uint64"}
            },
            "required": ["when"],
            "$defs": {"Mode": {"type": "string", "enum": ["a", "b"], "title": "Mode"}}
        });
        let lean = Value::Object(lean_input(schema.as_object().unwrap()));
        assert_eq!(
            lean,
            json!({
                "type": "object",
                "properties": {
                    "limit": {"description": "How many.", "type": "integer", "minimum": 1},
                    "mode": {"description": "Which side.", "type": "string", "enum": ["a", "b"]},
                    "level": {"description": "How loud.", "type": "string", "enum": ["warn", "info"]},
                    "when": {"type": "string", "format": "date-time"},
                    "properties": {"type": "string"}
                },
                "required": ["when"]
            })
        );
        let output = json!({"$schema": "x", "type": "object", "properties": {"n": {"type": ["integer", "null"], "format": "uint64"}}});
        assert_eq!(
            Value::Object(lean_output(output.as_object().unwrap())),
            json!({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}})
        );
    }
}
