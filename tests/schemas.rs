//! `schemas/` holds the JSON Schemas of every MCP tool's input and output,
//! generated from the Rust types; this fails when they are out of date.

use std::path::Path;

#[test]
fn the_schemas_folder_matches_the_tools() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let files = ken::serve::schema_files();
    assert!(
        files.len() >= 20,
        "every tool has an input schema, data tools an output schema"
    );
    let mut stale = Vec::new();
    for (name, text) in &files {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if &on_disk != text {
            stale.push(name.clone());
        }
        let schema: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(schema["type"], "object", "{name}");
    }
    let expected: std::collections::HashSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !expected.contains(name.as_str()) {
            stale.push(format!("{name} (no such tool any more)"));
        }
    }
    assert!(
        stale.is_empty(),
        "schemas/ is out of date for {stale:?}: run `cargo run --release -- schemas --out schemas` and delete \
         files of removed tools"
    );
}

#[test]
fn every_tool_documents_its_arguments() {
    for tool in ken::serve::tool_definitions() {
        let props = tool.input_schema.get("properties").and_then(|p| p.as_object());
        for (arg, schema) in props.into_iter().flatten() {
            let described = schema.get("description").is_some() || schema.get("$ref").is_some();
            assert!(described, "{}: argument `{arg}` has no description", tool.name);
        }
    }
}
