//! The JSON output stays what docs/JSON.md documents: every field name the
//! report serializes is documented there, and the schema version matches.

use std::collections::BTreeSet;

mod common;

use common::full_report;
use rip_probe::model::SCHEMA_VERSION;

fn keys(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_field_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/JSON.md"))
        .expect("docs/JSON.md");
    let mut out = Vec::new();
    rip_probe::render::json(&full_report(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let mut names = BTreeSet::new();
    keys(&v, &mut names);
    let undocumented: Vec<_> = names
        .iter()
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/JSON.md: {undocumented:?}"
    );
    assert!(doc.contains(&format!("(schema {SCHEMA_VERSION})")));
    assert_eq!(v["schema"], SCHEMA_VERSION);
}
