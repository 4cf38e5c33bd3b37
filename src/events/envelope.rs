//! The event envelope an analysis service sends: parsed from JSON of at most
//! [`limits::EVENT_ENVELOPE_MAX_BYTES`], every field checked against `src/limits.rs`, then
//! handed to the catalog as its own row type ([`EventFields`]).

use crate::catalog::events::{EventFields, query_term};
use crate::limits;

/// Why an envelope is refused; `field` names the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct EnvelopeError {
    pub field: String,
    pub reason: String,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> EnvelopeError {
    EnvelopeError { field: field.into(), reason: reason.into() }
}

/// Wall times an envelope may carry: 1970 to 2200.
const WALL_MAX_US: i64 = 7_258_118_400_000_000;

/// A short name: non-empty, at most `max` bytes, no control characters.
fn check_name(field: &str, v: &str, max: usize) -> Result<(), EnvelopeError> {
    if v.is_empty() || v.len() > max {
        return Err(bad(field, format!("must be 1 to {max} bytes")));
    }
    if v.chars().any(char::is_control) {
        return Err(bad(field, "must not contain control characters"));
    }
    Ok(())
}

fn check_fraction(field: &str, v: f32) -> Result<(), EnvelopeError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) { Ok(()) } else { Err(bad(field, "must be a number from 0 to 1")) }
}

/// Parses and checks an envelope into the fields the catalog stores; a missing time becomes
/// `arrived_us`, and labels are lower-cased.
pub fn parse(bytes: &[u8], arrived_us: i64) -> Result<EventFields, EnvelopeError> {
    if bytes.len() > limits::EVENT_ENVELOPE_MAX_BYTES {
        return Err(bad(
            "",
            format!("the envelope is over {} bytes (EVENT_ENVELOPE_MAX_BYTES)", limits::EVENT_ENVELOPE_MAX_BYTES),
        ));
    }
    // serde would also take a struct from an array of its fields in order.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(bad("", "the envelope must be a JSON object"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut e: EventFields = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        bad(if path == "." { String::new() } else { path }, err.into_inner().to_string())
    })?;
    de.end().map_err(|err| bad("", err.to_string()))?;
    check(&mut e, arrived_us)?;
    Ok(e)
}

fn check(e: &mut EventFields, arrived_us: i64) -> Result<(), EnvelopeError> {
    if let Some(id) = &e.id {
        check_name("id", id, limits::EVENT_ID_MAX_BYTES)?;
    }
    if let Some(k) = &e.idempotency_key {
        check_name("idempotency_key", k, limits::EVENT_IDEMPOTENCY_KEY_MAX_BYTES)?;
    }
    check_name("camera", &e.camera, limits::CAMERA_NAME_MAX_BYTES)?;
    let time = *e.time_us.get_or_insert(arrived_us);
    if !(0..=WALL_MAX_US).contains(&time) {
        return Err(bad("time_us", "out of range (UTC µs since 1970)"));
    }
    if let Some(end) = e.end_us
        && !(time..=WALL_MAX_US).contains(&end)
    {
        return Err(bad("end_us", "must not be before time_us"));
    }
    if e.labels.len() > limits::EVENT_LABELS_MAX {
        return Err(bad("labels", format!("at most {} (EVENT_LABELS_MAX)", limits::EVENT_LABELS_MAX)));
    }
    // Normalized first (trimmed, lower-cased: that may lengthen it), then checked.
    for (i, l) in e.labels.iter_mut().enumerate() {
        *l = query_term(l);
        check_name(&format!("labels[{i}]"), l, limits::EVENT_LABEL_MAX_BYTES)?;
    }
    if let Some(s) = e.score {
        check_fraction("score", s)?;
    }
    if e.boxes.len() > limits::EVENT_BOXES_MAX {
        return Err(bad("boxes", format!("at most {} (EVENT_BOXES_MAX)", limits::EVENT_BOXES_MAX)));
    }
    for (i, b) in e.boxes.iter_mut().enumerate() {
        let at = |k: &str| format!("boxes[{i}].{k}");
        if let Some(l) = &mut b.label {
            *l = query_term(l);
            check_name(&at("label"), l, limits::EVENT_LABEL_MAX_BYTES)?;
        }
        if let Some(s) = b.score {
            check_fraction(&at("score"), s)?;
        }
        for (k, v) in [("x", b.x), ("y", b.y), ("w", b.w), ("h", b.h)] {
            check_fraction(&at(k), v)?;
        }
        // A little slack for rounding in the sender.
        if b.x + b.w > 1.001 || b.y + b.h > 1.001 {
            return Err(bad(at("w"), "the box reaches outside the picture"));
        }
    }
    if e.text.len() > limits::EVENT_TEXT_MAX_BYTES {
        return Err(bad("text", format!("at most {} bytes (EVENT_TEXT_MAX_BYTES)", limits::EVENT_TEXT_MAX_BYTES)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::events::words;

    const NOW: i64 = 1_800_000_000_000_000;

    #[test]
    fn a_full_envelope_parses_and_gives_its_search_terms() {
        let json = br#"{"id":"det-1","camera":"front","time_us":1800000000000000,"labels":["Person","car"],
            "score":0.9,"boxes":[{"label":"person","score":0.8,"x":0.1,"y":0.2,"w":0.3,"h":0.4}],
            "text":"A person at the door, then a car","idempotency_key":"k1"}"#;
        let e = parse(json, NOW + 5).unwrap();
        assert_eq!(e.labels, ["person", "car"]);
        let stored = e.clone();
        assert_eq!(stored.time(), NOW);
        assert!(e.record);
        assert_eq!(stored.terms(), ["label:person", "label:car", "person", "at", "the", "door", "then", "car"]);
        let bare = parse(br#"{"camera":"front"}"#, NOW).unwrap();
        assert_eq!(bare.time(), NOW, "no time: when it arrived");
        // What is stored parses again to the same.
        let again = parse(&serde_json::to_vec(&stored).unwrap(), 0).unwrap();
        assert_eq!(again, e);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: &[(&str, &str)] = &[
            (r#"{"camera":"front","labels":"person"}"#, "labels"),
            (r#"{"camera":""}"#, "camera"),
            (r#"{"camera":"front","score":1.5}"#, "score"),
            (r#"{"camera":"front","score":"NaN"}"#, "score"),
            (r#"{"camera":"front","boxes":[{"x":0.9,"y":0,"w":0.5,"h":0.1}]}"#, "boxes[0].w"),
            (r#"{"camera":"front","boxes":[{"x":-0.1,"y":0,"w":0.5,"h":0.1}]}"#, "boxes[0].x"),
            (r#"{"camera":"front","time_us":-1}"#, "time_us"),
            (r#"{"camera":"front","time_us":100,"end_us":99}"#, "end_us"),
            (r#"{"camera":"front","colour":"red"}"#, "colour"),
            (r#"{"camera":"front","labels":["a\u0000b"]}"#, "labels[0]"),
            (r#"{"camera":"front"} {"camera":"back"}"#, ""),
            (r#"[1,2,3]"#, ""),
        ];
        for (json, field) in cases {
            let e = parse(json.as_bytes(), NOW).expect_err(json);
            assert_eq!(e.field, *field, "{json}: {e}");
        }
    }

    #[test]
    fn labels_are_checked_as_stored() {
        // Lower-casing "İ" takes 2 bytes to 3: 22 of them pass as 44 bytes, not as 66.
        let json = serde_json::json!({"camera": "front", "labels": ["İ".repeat(22)]}).to_string();
        assert_eq!(parse(json.as_bytes(), NOW).unwrap_err().field, "labels[0]");
        let json = serde_json::json!({"camera": "front", "labels": ["  Person "]}).to_string();
        assert_eq!(parse(json.as_bytes(), NOW).unwrap().labels, ["person"]);
        assert_eq!(words("a red VAN, twice-twice").collect::<Vec<_>>(), ["red", "van", "twice", "twice"]);
    }

    #[test]
    fn every_list_and_string_stops_at_its_ceiling() {
        let labels = vec!["x"; limits::EVENT_LABELS_MAX + 1];
        let json = serde_json::json!({"camera": "front", "labels": labels}).to_string();
        assert_eq!(parse(json.as_bytes(), NOW).unwrap_err().field, "labels");
        let b = serde_json::json!({"x": 0, "y": 0, "w": 0.1, "h": 0.1});
        let json = serde_json::json!({"camera": "front", "boxes": vec![b; limits::EVENT_BOXES_MAX + 1]}).to_string();
        assert_eq!(parse(json.as_bytes(), NOW).unwrap_err().field, "boxes");
        let json = serde_json::json!({"camera": "front", "text": "a".repeat(limits::EVENT_TEXT_MAX_BYTES + 1)});
        assert_eq!(parse(json.to_string().as_bytes(), NOW).unwrap_err().field, "text");
        let json = serde_json::json!({"camera": "front", "id": "i".repeat(limits::EVENT_ID_MAX_BYTES + 1)});
        assert_eq!(parse(json.to_string().as_bytes(), NOW).unwrap_err().field, "id");
        let key = "k".repeat(limits::EVENT_IDEMPOTENCY_KEY_MAX_BYTES + 1);
        let json = serde_json::json!({"camera": "front", "idempotency_key": key});
        assert_eq!(parse(json.to_string().as_bytes(), NOW).unwrap_err().field, "idempotency_key");
        let long = format!(r#"{{"camera":"front","text":"{}"}}"#, " ".repeat(limits::EVENT_ENVELOPE_MAX_BYTES));
        assert!(parse(long.as_bytes(), NOW).unwrap_err().reason.contains("EVENT_ENVELOPE_MAX_BYTES"));
        let words: Vec<String> = (0..limits::EVENT_TERMS_MAX + 10).map(|i| format!("w{i}")).collect();
        let json = serde_json::json!({"camera": "front", "text": words.join(" ")});
        let e = parse(json.to_string().as_bytes(), NOW).unwrap();
        assert_eq!(e.terms().len(), limits::EVENT_TERMS_MAX);
    }
}
