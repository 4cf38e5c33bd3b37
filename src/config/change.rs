//! Changes to the config from the web face: a change set (JSON) applied to the config file's
//! text with `toml_edit`, so the comments, order and layout of everything a change does not
//! touch stay as whoever wrote the file left them. The result is checked by the same
//! validator as `check-config` ([`super::Config::parse`]) before anything is written.

use serde::{Deserialize, Deserializer};
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike, Value};

use crate::limits;

/// Changes against revision `base` of the config.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ChangeSet {
    pub base: u64,
    pub changes: Vec<Change>,
}

/// One change. Fields a change leaves out keep their value; `null` removes a field (back
/// to its default).
#[derive(Deserialize, Debug)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    AddCamera {
        name: String,
        set: CameraFields,
    },
    ChangeCamera {
        name: String,
        set: CameraFields,
    },
    RemoveCamera {
        name: String,
    },
    /// A setting outside the cameras, by its key path (`retention.total_max_bytes`).
    Set {
        key: String,
        value: Option<Scalar>,
    },
    /// The same policy on several cameras.
    Bulk {
        cameras: Vec<String>,
        set: Policy,
    },
    /// The whole config of an earlier revision (the only change of its set).
    Rollback {
        to: u64,
    },
}

/// A camera's fields, each optional.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct CameraFields {
    pub record: Option<String>,
    pub pre_roll_s: Option<u32>,
    pub post_roll_s: Option<u32>,
    pub keep_event_footage_days: Option<u32>,
    #[serde(default, deserialize_with = "present")]
    pub username: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub password: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub frame_max_bytes: Option<Option<Scalar>>,
    /// Its ONVIF device service (its events are followed there); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    pub onvif: Option<Option<String>>,
    pub main: Option<StreamFields>,
    #[serde(default, deserialize_with = "present")]
    pub sub: Option<Option<StreamFields>>,
}

/// A stream's fields, each optional.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct StreamFields {
    pub url: Option<String>,
    pub transport: Option<String>,
    /// The stream's own mode; `null`: the camera's.
    #[serde(default, deserialize_with = "present")]
    pub record: Option<Option<String>>,
}

/// What a bulk change may set: how cameras record, never where they are or their
/// credentials.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub record: Option<String>,
    pub pre_roll_s: Option<u32>,
    pub post_roll_s: Option<u32>,
    pub keep_event_footage_days: Option<u32>,
    /// Both streams' RTP transport.
    pub transport: Option<String>,
    /// How the sub stream records (where there is one); `null`: as the camera.
    #[serde(default, deserialize_with = "present")]
    pub sub_record: Option<Option<String>>,
}

/// A setting's value.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Text(String),
    /// A list of names (an archive target's `cameras`).
    List(Vec<String>),
}

/// A field that is present (even as `null`) is `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Why a change set cannot be applied: the field it names (`changes[2].name`) and why.
pub type Refusal = (String, String);

impl ChangeSet {
    /// Decodes a change set, bounded: the body's size is the caller's; the counts are here.
    pub fn decode(bytes: &[u8]) -> Result<ChangeSet, Refusal> {
        if bytes.len() as u64 > limits::CONFIG_CHANGE_SET_MAX_BYTES {
            return Err((
                String::new(),
                format!(
                    "the change set is over {} bytes (CONFIG_CHANGE_SET_MAX_BYTES)",
                    limits::CONFIG_CHANGE_SET_MAX_BYTES
                ),
            ));
        }
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let set: ChangeSet = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            (if path == "." { String::new() } else { path }, e.into_inner().to_string())
        })?;
        if set.changes.len() > limits::CONFIG_CHANGES_MAX {
            return Err((
                "changes".into(),
                format!("more than {} changes (CONFIG_CHANGES_MAX)", limits::CONFIG_CHANGES_MAX),
            ));
        }
        for (i, c) in set.changes.iter().enumerate() {
            match c {
                Change::Bulk { cameras, .. } if cameras.len() > limits::CONFIG_BULK_CAMERAS_MAX => {
                    return Err((
                        format!("changes[{i}].cameras"),
                        format!(
                            "{} cameras, over the {} one change may set (CONFIG_BULK_CAMERAS_MAX)",
                            cameras.len(),
                            limits::CONFIG_BULK_CAMERAS_MAX
                        ),
                    ));
                }
                Change::Rollback { .. } if set.changes.len() > 1 => {
                    return Err((format!("changes[{i}]"), "a rollback is the only change of its set".into()));
                }
                Change::Set { key, .. } if key.len() > limits::CONFIG_KEY_MAX_BYTES => {
                    return Err((format!("changes[{i}].key"), "too long a key".into()));
                }
                Change::Set { value: Some(Scalar::List(l)), .. } if l.len() > limits::CONFIG_BULK_CAMERAS_MAX => {
                    return Err((
                        format!("changes[{i}].value"),
                        format!("a list over {} names (CONFIG_BULK_CAMERAS_MAX)", limits::CONFIG_BULK_CAMERAS_MAX),
                    ));
                }
                _ => {}
            }
        }
        Ok(set)
    }

    /// The revision a rollback returns to, if this is one.
    pub fn rollback(&self) -> Option<u64> {
        match self.changes.as_slice() {
            [Change::Rollback { to }] => Some(*to),
            _ => None,
        }
    }
}

/// Applies every change to `doc` in order (a rollback is the caller's: it replaces the text).
pub fn apply(doc: &mut DocumentMut, set: &ChangeSet) -> Result<(), Refusal> {
    for (i, change) in set.changes.iter().enumerate() {
        let at = format!("changes[{i}]");
        apply_one(doc, change)
            .map_err(|(key, reason)| (if key.is_empty() { at.clone() } else { format!("{at}.{key}") }, reason))?;
    }
    Ok(())
}

fn apply_one(doc: &mut DocumentMut, change: &Change) -> Result<(), Refusal> {
    match change {
        Change::AddCamera { name, set } => {
            let cameras = cameras_mut(doc)?;
            if position(cameras, name).is_some() {
                return Err(("name".into(), format!("\"{name}\" is used by another camera")));
            }
            if set.main.as_ref().and_then(|m| m.url.as_ref()).is_none() {
                return Err(("set.main.url".into(), "a new camera needs its main stream's URL".into()));
            }
            let mut table = Table::new();
            table.insert("name", toml_edit::value(name.as_str()));
            cameras.push(table);
            let last = cameras.len() - 1;
            let table = cameras.get_mut(last).expect("pushed");
            write_camera(table, set);
            tidy(table);
            Ok(())
        }
        Change::ChangeCamera { name, set } => {
            let table = camera_mut(doc, name)?;
            write_camera(table, set);
            tidy(table);
            Ok(())
        }
        Change::RemoveCamera { name } => {
            let cameras = cameras_mut(doc)?;
            let i = position(cameras, name).ok_or_else(|| no_camera(name))?;
            cameras.remove(i);
            Ok(())
        }
        Change::Set { key, value } => set_setting(doc, key, value.as_ref()),
        Change::Bulk { cameras: names, set } => {
            let cameras = cameras_mut(doc)?;
            // Each camera's place, found once (not a walk of the list per name).
            let places: std::collections::HashMap<String, usize> = cameras
                .iter()
                .enumerate()
                .filter_map(|(i, t)| Some((t.get("name")?.as_str()?.to_string(), i)))
                .collect();
            for (j, name) in names.iter().enumerate() {
                let i = *places.get(name).ok_or_else(|| (format!("cameras[{j}]"), no_camera(name).1))?;
                write_policy(cameras.get_mut(i).expect("found"), set);
            }
            Ok(())
        }
        Change::Rollback { .. } => Ok(()),
    }
}

fn no_camera(name: &str) -> Refusal {
    ("name".into(), format!("there is no camera named \"{name}\""))
}

fn cameras_mut(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, Refusal> {
    let item = doc.entry("cameras").or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    item.as_array_of_tables_mut().ok_or_else(|| {
        (
            String::new(),
            "the file writes its cameras as an inline array: write them as [[cameras]] tables to edit them here".into(),
        )
    })
}

fn position(cameras: &ArrayOfTables, name: &str) -> Option<usize> {
    cameras.iter().position(|t| t.get("name").and_then(Item::as_str) == Some(name))
}

fn camera_mut<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut Table, Refusal> {
    let cameras = cameras_mut(doc)?;
    let i = position(cameras, name).ok_or_else(|| no_camera(name))?;
    Ok(cameras.get_mut(i).expect("found"))
}

/// Sets `key` in `t` to `v`, or removes it when `v` is none.
fn put(t: &mut dyn TableLike, key: &str, v: Option<Value>) {
    match v {
        Some(v) => {
            // A value keeps the decoration (spacing, comment) of the one it replaces.
            let decor = t.get(key).and_then(Item::as_value).map(|old| old.decor().clone());
            let mut v = v;
            if let Some(d) = decor {
                *v.decor_mut() = d;
            }
            t.insert(key, Item::Value(v));
        }
        None => {
            t.remove(key);
        }
    }
}

fn text(s: &str) -> Value {
    Value::from(s)
}

fn scalar(s: &Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::from(*b),
        Scalar::Int(n) => Value::from(*n),
        Scalar::Text(t) => Value::from(t.as_str()),
        Scalar::List(l) => Value::Array(l.iter().map(String::as_str).collect()),
    }
}

/// The stream table `key` of a camera (inline `main = { … }` or a `[cameras.main]` table),
/// made (inline) when missing.
fn stream_mut<'a>(camera: &'a mut Table, key: &str) -> &'a mut dyn TableLike {
    let item = camera.entry(key).or_insert(Item::Value(Value::InlineTable(InlineTable::new())));
    if !item.is_table_like() {
        *item = Item::Value(Value::InlineTable(InlineTable::new()));
    }
    item.as_table_like_mut().expect("a table")
}

fn write_stream(t: &mut dyn TableLike, s: &StreamFields) {
    if let Some(url) = &s.url {
        put(t, "url", Some(text(url)));
    }
    if let Some(transport) = &s.transport {
        put(t, "transport", Some(text(transport)));
    }
    if let Some(record) = &s.record {
        put(t, "record", record.as_deref().map(text));
    }
}

fn write_camera(t: &mut Table, set: &CameraFields) {
    if let Some(r) = &set.record {
        put(t, "record", Some(text(r)));
    }
    if let Some(s) = set.pre_roll_s {
        put(t, "pre_roll_s", Some(Value::from(i64::from(s))));
    }
    if let Some(s) = set.post_roll_s {
        put(t, "post_roll_s", Some(Value::from(i64::from(s))));
    }
    if let Some(d) = set.keep_event_footage_days {
        put(t, "keep_event_footage_days", Some(Value::from(i64::from(d))));
    }
    if let Some(u) = &set.username {
        put(t, "username", u.as_deref().map(text));
    }
    if let Some(p) = &set.password {
        put(t, "password", p.as_deref().map(text));
    }
    if let Some(f) = &set.frame_max_bytes {
        put(t, "frame_max_bytes", f.as_ref().map(scalar));
    }
    if let Some(o) = &set.onvif {
        put(t, "onvif", o.as_deref().map(text));
    }
    if let Some(main) = &set.main {
        write_stream(stream_mut(t, "main"), main);
    }
    match &set.sub {
        Some(Some(sub)) => write_stream(stream_mut(t, "sub"), sub),
        Some(None) => {
            t.remove("sub");
        }
        None => {}
    }
}

/// Lays out the camera's inline stream tables again (`{ url = "…", transport = "udp" }`)
/// once keys were added to or removed from them.
fn tidy(t: &mut Table) {
    for key in ["main", "sub"] {
        if let Some(inline) = t.get_mut(key).and_then(Item::as_inline_table_mut) {
            inline.fmt();
        }
    }
}

fn write_policy(t: &mut Table, p: &Policy) {
    write_camera(
        t,
        &CameraFields {
            record: p.record.clone(),
            pre_roll_s: p.pre_roll_s,
            post_roll_s: p.post_roll_s,
            keep_event_footage_days: p.keep_event_footage_days,
            ..Default::default()
        },
    );
    let has_sub = t.contains_key("sub");
    if let Some(transport) = &p.transport {
        put(stream_mut(t, "main"), "transport", Some(text(transport)));
        if has_sub {
            put(stream_mut(t, "sub"), "transport", Some(text(transport)));
        }
    }
    if let Some(record) = &p.sub_record
        && has_sub
    {
        put(stream_mut(t, "sub"), "record", record.as_deref().map(text));
    }
    tidy(t);
}

/// Sets a setting outside the cameras by its dotted key path; tables on the way are made.
/// What the key and value mean is the validator's to say.
fn set_setting(doc: &mut DocumentMut, key: &str, value: Option<&Scalar>) -> Result<(), Refusal> {
    let parts: Vec<&str> = key.split('.').collect();
    let bad = |why: &str| ("key".to_string(), why.to_string());
    // (`-` for the names of archive targets and sign-in providers: `archive.off-site.bucket`.)
    if parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')) {
        return Err(bad("a key is names of letters, digits, '_' and '-' joined by '.'"));
    }
    if parts.len() > 3 {
        return Err(bad("no setting is that deep"));
    }
    if parts[0] == "cameras" {
        return Err(bad("cameras change through add_camera, change_camera, remove_camera and bulk"));
    }
    let (last, path) = parts.split_last().expect("one part at least");
    let mut table: &mut dyn TableLike = doc.as_table_mut();
    for p in path {
        let item = table.entry(p).or_insert(Item::Table(Table::new()));
        table = item.as_table_like_mut().ok_or_else(|| bad("a part of this key is a value, not a table"))?;
    }
    put(table, last, value.map(scalar));
    if value.is_none() {
        // A table left empty by the removal goes too (`archive.offsite` removed leaves no
        // empty `[archive]`).
        for depth in (1..=path.len()).rev() {
            let (name, parents) = path[..depth].split_last().expect("depth ≥ 1");
            let mut parent: &mut dyn TableLike = doc.as_table_mut();
            for p in parents {
                parent = parent.get_mut(p).and_then(Item::as_table_like_mut).expect("made above");
            }
            if parent.get(name).and_then(Item::as_table_like).is_some_and(|t| t.is_empty()) {
                parent.remove(name);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# The box's config.
data_dir = "data"   # where recordings go

[retention]
stream_max_bytes = "1 GiB"
total_max_bytes = "4 GiB"

# The porch, over the door.
[[cameras]]
name = "porch"
record = "continuous"  # always
main = { url = "rtsp://192.0.2.1/main" }

[[cameras]]
name = "yard"
username = "admin"
password = "secret"
main = { url = "rtsp://192.0.2.2/main" }
sub = { url = "rtsp://192.0.2.2/sub", transport = "udp" }
"#;

    fn run(json: &str) -> Result<String, Refusal> {
        let set = ChangeSet::decode(json.as_bytes())?;
        let mut doc: DocumentMut = FILE.parse().unwrap();
        apply(&mut doc, &set)?;
        Ok(doc.to_string())
    }

    #[test]
    fn a_setting_of_a_named_table_takes_its_dashes_and_its_removal_leaves_no_empty_table() {
        let out = run(r#"{"base":1,"changes":[{"op":"set","key":"archive.off-site.bucket","value":"nvr"},
            {"op":"set","key":"archive.off-site.cameras","value":["porch","yard"]}]}"#)
        .unwrap();
        assert!(out.contains("[archive.off-site]\nbucket = \"nvr\"\ncameras = [\"porch\", \"yard\"]"), "{out}");
        let set =
            ChangeSet::decode(br#"{"base":1,"changes":[{"op":"set","key":"archive.off-site","value":null}]}"#).unwrap();
        let mut doc: DocumentMut = out.parse().unwrap();
        apply(&mut doc, &set).unwrap();
        assert_eq!(doc.to_string(), FILE, "the file as it was, with no [archive] left");
    }

    #[test]
    fn a_change_keeps_the_comments_and_order_of_what_it_does_not_touch() {
        let out = run(
            r#"{"base":1,"changes":[{"op":"change_camera","name":"porch","set":{"record":"events","pre_roll_s":3}}]}"#,
        )
        .unwrap();
        assert!(out.starts_with("# The box's config.\ndata_dir = \"data\"   # where recordings go\n"), "{out}");
        assert!(
            out.contains("# The porch, over the door.\n[[cameras]]\nname = \"porch\"\nrecord = \"events\"  # always\n"),
            "{out}"
        );
        assert!(out.contains("pre_roll_s = 3"), "{out}");
        // The yard is as it was, byte for byte.
        assert!(out.ends_with(&FILE[FILE.find("[[cameras]]\nname = \"yard\"").unwrap()..]), "{out}");
    }

    #[test]
    fn cameras_are_added_and_removed_and_streams_set() {
        let out = run(
            r#"{"base":1,"changes":[
                {"op":"remove_camera","name":"porch"},
                {"op":"add_camera","name":"gate","set":{"main":{"url":"rtsp://192.0.2.3/a","transport":"udp"},"username":"u","password":"p"}},
                {"op":"change_camera","name":"yard","set":{"sub":null,"main":{"record":"events"}}}]}"#,
        )
        .unwrap();
        assert!(!out.contains("porch"), "{out}");
        assert!(out.contains("name = \"gate\""), "{out}");
        assert!(out.contains(r#"main = { url = "rtsp://192.0.2.3/a", transport = "udp" }"#), "{out}");
        assert!(!out.contains("/sub"), "{out}");
        assert!(out.contains(r#"main = { url = "rtsp://192.0.2.2/main", record = "events" }"#), "{out}");
        let back = crate::config::Config::parse(&out, "t", std::path::Path::new("/")).unwrap();
        assert_eq!(back.cameras.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["yard", "gate"]);
    }

    #[test]
    fn bulk_sets_a_policy_and_settings_are_set_by_their_path() {
        let out = run(r#"{"base":1,"changes":[
                {"op":"bulk","cameras":["porch","yard"],"set":{"record":"events","transport":"udp","sub_record":"off"}},
                {"op":"set","key":"retention.total_max_bytes","value":"8 GiB"},
                {"op":"set","key":"webrtc.port","value":9000}]}"#)
        .unwrap();
        let c = crate::config::Config::parse(&out, "t", std::path::Path::new("/")).unwrap();
        assert_eq!(c.retention.total_max_bytes, 8 << 30);
        assert_eq!(c.webrtc.port, 9000);
        for cam in &c.cameras {
            assert_eq!(cam.record, crate::config::RecordMode::Events);
        }
        assert_eq!(c.cameras[1].record_sub, crate::config::RecordMode::Off);
    }

    #[test]
    fn bad_change_sets_name_their_field() {
        let field = |json: &str| run(json).unwrap_err().0;
        assert_eq!(field(r#"{"base":1,"changes":[{"op":"remove_camera","name":"nope"}]}"#), "changes[0].name");
        assert_eq!(
            field(r#"{"base":1,"changes":[{"op":"add_camera","name":"porch","set":{"main":{"url":"rtsp://h/"}}}]}"#),
            "changes[0].name"
        );
        assert_eq!(
            field(r#"{"base":1,"changes":[{"op":"add_camera","name":"new","set":{}}]}"#),
            "changes[0].set.main.url"
        );
        assert_eq!(field(r#"{"base":1,"changes":[{"op":"set","key":"cameras.x","value":1}]}"#), "changes[0].key");
        assert_eq!(field(r#"{"base":1,"changes":[{"op":"set","key":"data_dir.x","value":1}]}"#), "changes[0].key");
        assert!(
            field(r#"{"base":1,"changes":[{"op":"change_camera","name":"porch","set":{"recrd":"x"}}]}"#)
                .starts_with("changes[0]")
        );
        assert!(
            field(r#"{"base":1,"changes":[{"op":"change_camera","name":"porch","set":{"pre_roll_s":"x"}}]}"#)
                .starts_with("changes[0]")
        );
        assert_eq!(field(r#"{"base":"x","changes":[]}"#), "base");
        let many: Vec<String> = (0..65).map(|i| format!("\"c{i}\"")).collect();
        let bulk = format!(r#"{{"base":1,"changes":[{{"op":"bulk","cameras":[{}],"set":{{}}}}]}}"#, many.join(","));
        assert_eq!(field(&bulk), "changes[0].cameras");
        let big =
            format!(r#"{{"base":1,"changes":[],"x":"{}"}}"#, "a".repeat(limits::CONFIG_CHANGE_SET_MAX_BYTES as usize));
        assert_eq!(field(&big), "");
        assert_eq!(
            field(r#"{"base":1,"changes":[{"op":"rollback","to":1},{"op":"remove_camera","name":"porch"}]}"#),
            "changes[0]"
        );
    }

    #[test]
    fn the_count_of_changes_and_a_keys_length_have_their_ceilings() {
        let change = r#"{"op":"set","key":"flush_interval_s","value":2}"#;
        let set = |n: usize| format!(r#"{{"base":1,"changes":[{}]}}"#, vec![change; n].join(","));
        assert!(run(&set(limits::CONFIG_CHANGES_MAX)).is_ok(), "at the ceiling");
        assert_eq!(run(&set(limits::CONFIG_CHANGES_MAX + 1)).unwrap_err().0, "changes");
        let key = |n: usize| format!(r#"{{"base":1,"changes":[{{"op":"set","key":"{}","value":1}}]}}"#, "k".repeat(n));
        assert!(run(&key(limits::CONFIG_KEY_MAX_BYTES)).is_ok(), "at the ceiling (the validator refuses the key)");
        assert_eq!(run(&key(limits::CONFIG_KEY_MAX_BYTES + 1)).unwrap_err().0, "changes[0].key");
    }
}
