//! Tool schemas every MCP host takes without a word.
//!
//! schemars writes the Rust type of a number as its `format` (`uint64`,
//! `int64`, `uint32`, `double`, ...). JSON Schema 2020-12 defines no such
//! formats, and hosts with strict validators (Gemini CLI, opencode, through
//! ajv) print `unknown format "uint64" ignored` for every one of them. The
//! schemas are rewritten once, here, for every tool: a non-standard format
//! is removed, and where it carried a bound that matters (an unsigned or a
//! 32-bit integer) the bound becomes `minimum`/`maximum`. Property names
//! and `required` are untouched: the schemas are a public contract.

use serde_json::{Map, Value, json};

/// The formats JSON Schema 2020-12 defines (Validation, section 7.3).
pub const STANDARD_FORMATS: [&str; 19] = [
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

/// Every keyword of JSON Schema 2020-12's vocabularies (core, applicator,
/// unevaluated, validation, meta-data, format, content).
pub const KEYWORDS: [&str; 56] = [
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
];

/// Keywords whose value is a map of names to subschemas.
const SCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "$defs", "dependentSchemas"];
/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAYS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value is one subschema.
const SCHEMA_ONE: [&str; 11] = [
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];

/// Calls `f` on `schema` and every subschema in it, by keyword position
/// (a property named `format` is a name, not a keyword, and `default` or
/// `examples` values are data, not schemas).
pub fn visit_mut(schema: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(obj) = schema else { return };
    f(obj);
    for (key, value) in obj.iter_mut() {
        let key = key.as_str();
        if SCHEMA_MAPS.contains(&key) {
            if let Value::Object(map) = value {
                for sub in map.values_mut() {
                    visit_mut(sub, f);
                }
            }
        } else if SCHEMA_ARRAYS.contains(&key) {
            if let Value::Array(list) = value {
                for sub in list {
                    visit_mut(sub, f);
                }
            }
        } else if SCHEMA_ONE.contains(&key) {
            visit_mut(value, f);
        }
    }
}

/// The bounds a schemars integer format stands for, where they matter to a
/// caller. 64-bit bounds are left out: a JavaScript host cannot even write
/// them exactly.
fn bounds(format: &str) -> (Option<i64>, Option<i64>) {
    match format {
        "uint8" => (Some(0), Some(u8::MAX.into())),
        "uint16" => (Some(0), Some(u16::MAX.into())),
        "uint32" => (Some(0), Some(u32::MAX.into())),
        "uint" | "uint64" | "uint128" => (Some(0), None),
        "int8" => (Some(i8::MIN.into()), Some(i8::MAX.into())),
        "int16" => (Some(i16::MIN.into()), Some(i16::MAX.into())),
        "int32" => (Some(i32::MIN.into()), Some(i32::MAX.into())),
        _ => (None, None),
    }
}

/// Rewrites one schema in place: no `format` outside [`STANDARD_FORMATS`],
/// each integer format's bound kept as `minimum`/`maximum` (a tighter one
/// already there stays).
pub fn make_portable(schema: &mut Value) {
    visit_mut(schema, &mut |obj| {
        let Some(Value::String(format)) = obj.get("format") else { return };
        if STANDARD_FORMATS.contains(&format.as_str()) {
            return;
        }
        let (min, max) = bounds(format);
        obj.remove("format");
        if let Some(min) = min {
            obj.entry("minimum").or_insert(json!(min));
        }
        if let Some(max) = max {
            obj.entry("maximum").or_insert(json!(max));
        }
    });
}

/// [`make_portable`] as a schemars transform, for types whose schema rmcp's
/// macros generate (the return channel's tools):
/// `#[schemars(transform = crate::schema::portable)]`.
pub fn portable(schema: &mut rmcp::schemars::Schema) {
    if let Some(obj) = schema.as_object_mut() {
        let mut value = Value::Object(std::mem::take(obj));
        make_portable(&mut value);
        if let Value::Object(done) = value {
            *obj = done;
        }
    }
}

/// What is wrong with a tool schema for a strict 2020-12 host: unknown
/// keywords, non-standard formats, `definitions` instead of `$defs`, a
/// `$schema` other than 2020-12. Empty when nothing is.
pub fn problems(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut copy = schema.clone();
    if let Some(meta) = schema.get("$schema")
        && meta != "https://json-schema.org/draft/2020-12/schema"
    {
        found.push(format!("$schema is {meta}, not draft 2020-12"));
    }
    visit_mut(&mut copy, &mut |obj| {
        for (key, value) in obj.iter() {
            if !KEYWORDS.contains(&key.as_str()) {
                found.push(format!("unknown keyword `{key}`"));
            }
            if key == "format" && !value.as_str().is_some_and(|f| STANDARD_FORMATS.contains(&f)) {
                found.push(format!("non-standard format {value}"));
            }
        }
    });
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn formats_become_bounds_and_names_stay() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "format": {"type": "string", "format": "uri"},
                "n": {"type": ["integer", "null"], "format": "uint64", "minimum": 0},
                "m": {"type": "integer", "format": "uint32", "maximum": 10},
                "x": {"type": "number", "format": "double", "default": {"format": "int64"}},
            },
            "required": ["n"],
            "$defs": {"T": {"anyOf": [{"type": "integer", "format": "int32"}, {"type": "string"}]}}
        });
        make_portable(&mut s);
        assert_eq!(
            s,
            json!({
                "type": "object",
                "properties": {
                    "format": {"type": "string", "format": "uri"},
                    "n": {"type": ["integer", "null"], "minimum": 0},
                    "m": {"type": "integer", "minimum": 0, "maximum": 10},
                    "x": {"type": "number", "default": {"format": "int64"}},
                },
                "required": ["n"],
                "$defs": {"T": {"anyOf": [
                    {"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX},
                    {"type": "string"}
                ]}}
            })
        );
        assert_eq!(problems(&s), Vec::<String>::new());
    }

    #[test]
    fn problems_are_named() {
        let s = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"a": {"type": "integer", "format": "int64", "nullable": true}},
            "definitions": {}});
        let p = problems(&s);
        assert_eq!(p.len(), 4, "{p:?}");
    }
}
