//! A plan: what a change set makes of the config before anything is written. The whole
//! candidate file is validated as `check-config` would; the memory budget is computed
//! before and after (a plan that does not fit is refused, saying by how much); the answer
//! is a diff per camera and field with no secret in it, and what must restart.

use std::path::Path;

use serde::Serialize;
use toml_edit::DocumentMut;

use super::change::{self, ChangeSet, Refusal};
use super::snapshot::{address, transport};
use super::{Camera, Config};
use crate::budget;

/// What a plan does to the running box.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Effect {
    /// Cameras that stop for good.
    pub stop: Vec<String>,
    /// Cameras that stop and start again with their new settings.
    pub restart: Vec<String>,
    /// Cameras that start.
    pub start: Vec<String>,
    /// Settings that cannot change while the box runs: keeppeek restarts cleanly to apply
    /// them (every camera with it).
    pub restart_box: Vec<String>,
    /// Settings taken while the box runs ([`LIVE_SETTINGS`]).
    pub live: Vec<String>,
}

/// The settings the running box takes without a restart: the retention caps and the share
/// events may hold (the flusher keeps them from the next message on and enforces them at
/// once).
pub const LIVE_SETTINGS: [&str; 3] =
    ["retention.stream_max_bytes", "retention.total_max_bytes", "retention.held_max_percent"];

/// The changes to one camera (`camera` none: the settings): (field, from, to), `None` for
/// absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diff {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub camera: Option<String>,
    /// `added`, `removed` or `changed`.
    pub what: &'static str,
    pub fields: Vec<(String, Option<String>, Option<String>)>,
}

/// A computed plan. `text` and `config` hold secrets: only [`Plan::answer`] leaves the box.
pub struct Plan {
    pub base: u64,
    pub text: String,
    pub config: Config,
    pub diff: Vec<Diff>,
    pub effect: Effect,
    pub budget_before: u64,
    pub budget_after: u64,
    pub budget_allowed: u64,
}

/// Why no plan: the field (a change's, `changes[1].name`, or the file's, `cameras[2].main.url`)
/// and why.
pub type Refused = Refusal;

/// Plans `set` on `current` (whose file text is `text`), `earlier` giving an earlier
/// revision's text for a rollback. `file` names the file in messages; relative paths in it
/// are taken from `base_dir`.
pub fn plan(
    current: &Config,
    text: &str,
    set: &ChangeSet,
    earlier: impl FnOnce(u64) -> Option<String>,
    file: &str,
    base_dir: &Path,
) -> Result<Plan, Refused> {
    plan_on(current, &document(text)?, set, earlier, file, base_dir)
}

/// The file's text as a document to change.
pub fn document(text: &str) -> Result<DocumentMut, Refused> {
    text.parse().map_err(|e: toml_edit::TomlError| (String::new(), format!("the file does not parse: {e}")))
}

/// [`plan`] on the file already parsed (`doc`), as the running box keeps it.
pub fn plan_on(
    current: &Config,
    doc: &DocumentMut,
    set: &ChangeSet,
    earlier: impl FnOnce(u64) -> Option<String>,
    file: &str,
    base_dir: &Path,
) -> Result<Plan, Refused> {
    let candidate = match set.rollback() {
        Some(to) => {
            earlier(to).ok_or_else(|| ("changes[0].to".to_string(), format!("there is no revision {to} kept")))?
        }
        None => {
            let mut doc = doc.clone();
            change::apply(&mut doc, set)?;
            doc.to_string()
        }
    };
    if candidate.len() as u64 > crate::limits::CONFIG_FILE_MAX_BYTES {
        return Err((String::new(), "the config would be over CONFIG_FILE_MAX_BYTES".into()));
    }
    let config = Config::parse(&candidate, file, base_dir).map_err(|e| (e.key, e.reason))?;
    let before = budget::compute(current);
    let after = budget::compute(&config);
    if !after.fits() {
        let over = after.total_bytes().saturating_sub(after.allowed_bytes);
        return Err((
            "budget".into(),
            format!(
                "the box would need {} MiB of memory, {} MiB more than the {} MiB it allows",
                after.total_bytes() >> 20,
                over.div_ceil(1 << 20),
                after.allowed_bytes >> 20
            ),
        ));
    }
    let (diff, effect) = compare(current, &config);
    Ok(Plan {
        base: set.base,
        text: candidate,
        config,
        diff,
        effect,
        budget_before: before.total_bytes(),
        budget_after: after.total_bytes(),
        budget_allowed: after.allowed_bytes,
    })
}

/// A plan as answered: nothing secret in it. Serialized straight to text (`to_string`).
#[derive(Serialize)]
pub struct Answer<'a> {
    base: u64,
    diff: &'a [Diff],
    effect: &'a Effect,
    budget: BudgetAnswer,
    changes_nothing: bool,
}

#[derive(Serialize)]
struct BudgetAnswer {
    before_bytes: u64,
    after_bytes: u64,
    allowed_bytes: u64,
}

impl std::fmt::Display for Answer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

impl Plan {
    /// The plan as answered: nothing secret in it.
    pub fn answer(&self) -> Answer<'_> {
        Answer {
            base: self.base,
            diff: &self.diff,
            effect: &self.effect,
            budget: BudgetAnswer {
                before_bytes: self.budget_before,
                after_bytes: self.budget_after,
                allowed_bytes: self.budget_allowed,
            },
            changes_nothing: self.diff.is_empty(),
        }
    }

    /// One line per change, for the revision's summary.
    pub fn summary(&self) -> Vec<String> {
        self.diff
            .iter()
            .flat_map(|d| {
                let whom = d.camera.as_deref().map_or(String::new(), |c| format!("camera {c}: "));
                match d.what {
                    "changed" => d
                        .fields
                        .iter()
                        .map(|(f, from, to)| format!("{whom}{f} {} → {}", show(from), show(to)))
                        .collect::<Vec<_>>(),
                    what => vec![format!("{whom}{what}")],
                }
            })
            .collect()
    }
}

fn show(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("none")
}

/// A camera's fields as the diff shows them; a password only as set or not.
fn camera_fields(c: &Camera) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("record", Some(c.record.name().into())),
        ("sub.record", c.sub.as_ref().map(|_| c.record_sub.name().into())),
        ("pre_roll_s", Some((c.pre_roll_ms / 1000).to_string())),
        ("post_roll_s", Some((c.post_roll_ms / 1000).to_string())),
        ("keep_event_footage_days", Some(c.keep_event_footage_days.to_string())),
        ("username", c.username.clone()),
        ("password", c.password.as_ref().map(|_| "set".into())),
        ("main.url", Some(address(&c.main))),
        ("main.transport", transport(&c.main)),
        ("sub.url", c.sub.as_ref().map(address)),
        ("sub.transport", c.sub.as_ref().and_then(transport)),
        ("frame_max_bytes", Some(c.frame_max_bytes.to_string())),
        ("onvif", c.onvif.as_ref().map(|u| u.to_string())),
    ]
}

/// The settings outside the cameras, as the diff shows them. None changes while the box
/// runs: each restarts it.
fn settings(c: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("data_dir", c.data_dir.display().to_string()),
        ("listen", c.listen.map_or("none".into(), |a| a.to_string())),
        ("https.listen", c.https.map_or("none".into(), |a| a.to_string())),
        ("flush_interval_s", c.flush_interval_s.to_string()),
        ("require_sane_clock", c.require_sane_clock.to_string()),
        ("ram_class", c.ram_class_bytes.to_string()),
        ("retention.stream_max_bytes", c.retention.stream_max_bytes.to_string()),
        ("retention.total_max_bytes", c.retention.total_max_bytes.to_string()),
        ("retention.held_max_percent", c.retention.held_max_percent.to_string()),
        ("webrtc.port", c.webrtc.port.to_string()),
        ("webrtc.loopback", c.webrtc.loopback.to_string()),
        ("preroll.stream_max_bytes", c.preroll.stream_max_bytes.to_string()),
        ("preroll.total_max_bytes", c.preroll.total_max_bytes.to_string()),
        ("pools.ingest_queues_max_bytes", c.pools.ingest_queues_max_bytes.to_string()),
        ("events.max_bytes", c.events_max_bytes.to_string()),
    ]
}

/// A sign-in provider's fields as the diff shows them (its secret as set or changed, never
/// itself; its CA as set).
fn oidc_fields(p: &crate::config::OidcProvider) -> Vec<(&'static str, String)> {
    vec![
        ("name", p.name.clone()),
        ("issuer", p.issuer.clone()),
        ("client_id", p.client_id.clone()),
        ("client_secret", if p.client_secret.is_some() { "set".into() } else { "none".into() }),
        ("role_claim", p.role_claim.clone()),
        ("admin_values", p.admin_values.join(", ")),
        ("viewer_values", p.viewer_values.join(", ")),
        ("ca_pem", if p.ca_pem.is_some() { "set".into() } else { "none".into() }),
    ]
}

/// The changes of one group of fields (a provider's, the broker's) as settings
/// `<key>.<field>`: `secret` names the field whose value is never shown and says whether it
/// changed from one set value to another (shown as `changed`). A group added or removed shows
/// only the fields it has.
fn group_changes(
    key: &str,
    old: Option<Vec<(&'static str, String)>>,
    new: Option<Vec<(&'static str, String)>>,
    secret: (&str, bool),
) -> Vec<(String, Option<String>, Option<String>)> {
    let mut out = Vec::new();
    for (i, (field, _)) in old.as_ref().or(new.as_ref()).into_iter().flatten().enumerate() {
        let from = old.as_ref().map(|f| f[i].1.clone());
        let mut to = new.as_ref().map(|f| f[i].1.clone());
        if *field == secret.0 && secret.1 {
            to = Some("changed".into());
        }
        let empty = |v: &Option<String>| v.as_deref().is_none_or(|v| v.is_empty() || v == "none");
        if from != to && !(empty(&from) && empty(&to)) {
            out.push((format!("{key}.{field}"), from, to));
        }
    }
    out
}

/// The sign-in providers' changes as settings `oidc.<id>.<field>`; all are taken while the
/// box runs.
fn oidc_changes(
    old: &[crate::config::OidcProvider],
    new: &[crate::config::OidcProvider],
) -> Vec<(String, Option<String>, Option<String>)> {
    let ids: std::collections::BTreeSet<&str> = old.iter().chain(new).map(|p| p.id.as_str()).collect();
    ids.into_iter()
        .flat_map(|id| {
            let (o, n) = (old.iter().find(|p| p.id == id), new.iter().find(|p| p.id == id));
            let changed = matches!((o, n), (Some(a), Some(b)) if a.client_secret.is_some() && b.client_secret.is_some() && a.client_secret != b.client_secret);
            group_changes(&format!("oidc.{id}"), o.map(oidc_fields), n.map(oidc_fields), ("client_secret", changed))
        })
        .collect()
}

/// The broker's fields as the diff shows them (its password as set or changed, never
/// itself; its CA as set).
fn mqtt_fields(m: &crate::config::MqttConfig) -> Vec<(&'static str, String)> {
    vec![
        ("host", m.host.clone()),
        ("port", m.port.to_string()),
        ("tls", m.tls.to_string()),
        ("ca_pem", if m.ca_pem.is_some() { "set".into() } else { "none".into() }),
        ("username", m.username.clone().unwrap_or_default()),
        ("password", if m.password.is_some() { "set".into() } else { "none".into() }),
        ("prefix", m.prefix.clone()),
        ("discovery_prefix", m.discovery_prefix.clone()),
        ("client_id", m.client_id.clone()),
    ]
}

/// The broker's changes as settings `mqtt.<field>`; all are taken while the box runs.
fn mqtt_changes(
    old: Option<&crate::config::MqttConfig>,
    new: Option<&crate::config::MqttConfig>,
) -> Vec<(String, Option<String>, Option<String>)> {
    let changed = matches!((old, new), (Some(a), Some(b)) if a.password.is_some() && b.password.is_some() && a.password != b.password);
    group_changes("mqtt", old.map(mqtt_fields), new.map(mqtt_fields), ("password", changed))
}

/// The camera port's fields as the diff shows them.
fn camera_port_fields(c: &crate::config::CameraPortConfig) -> Vec<(&'static str, String)> {
    vec![
        ("interface", c.interface.clone()),
        ("address", format!("{}/{}", c.address, c.prefix)),
        ("pool", format!("{}-{}", c.pool.0, c.pool.1)),
        ("lease_time_s", c.lease_time_s.to_string()),
        ("router", c.router.to_string()),
        ("web", c.web.to_string()),
    ]
}

/// An archive target's fields as the diff shows them (its secret as changed, never itself).
fn archive_fields(t: &crate::config::ArchiveTarget) -> Vec<(&'static str, String)> {
    let opt = |v: Option<u32>| v.map_or_else(String::new, |v| v.to_string());
    vec![
        ("endpoint", t.place.endpoint.as_str().trim_end_matches('/').to_string()),
        ("region", t.place.region.clone()),
        ("bucket", t.place.bucket.clone()),
        ("prefix", t.prefix.clone()),
        ("access_key", t.place.access_key.clone()),
        ("secret_key", "set".into()),
        ("path_style", t.place.path_style.to_string()),
        ("ca_pem", if t.place.ca_pem.is_some() { "set".into() } else { "none".into() }),
        ("max_kbit_s", opt(t.max_kbit_s)),
        ("cameras", t.cameras.join(", ")),
        ("streams", t.streams.name().into()),
        ("what", if t.events_only { "events" } else { "all" }.into()),
        ("keep_days", opt(t.keep_days)),
        ("before_delete", t.before_delete.to_string()),
        ("backlog_max", t.backlog_max_bytes.to_string()),
    ]
}

/// The archive targets' changes as settings `archive.<id>.<field>`; all are taken while the
/// box runs (the target starts again; recording is not touched).
fn archive_changes(
    old: &[crate::config::ArchiveTarget],
    new: &[crate::config::ArchiveTarget],
) -> Vec<(String, Option<String>, Option<String>)> {
    let ids: std::collections::BTreeSet<&str> = old.iter().chain(new).map(|t| t.id.as_str()).collect();
    ids.into_iter()
        .flat_map(|id| {
            let (o, n) = (old.iter().find(|t| t.id == id), new.iter().find(|t| t.id == id));
            let changed = |f: fn(&crate::config::ArchiveTarget) -> Option<&String>| {
                matches!((o, n), (Some(a), Some(b)) if f(a).is_some() && f(b).is_some() && f(a) != f(b))
            };
            let mut out = group_changes(
                &format!("archive.{id}"),
                o.map(archive_fields),
                n.map(archive_fields),
                ("secret_key", changed(|t| Some(&t.place.secret_key))),
            );
            // Another CA in place of one: "set" both sides, so said as changed.
            if changed(|t| t.place.ca_pem.as_ref()) {
                out.push((format!("archive.{id}.ca_pem"), Some("set".into()), Some("changed".into())));
            }
            out
        })
        .collect()
}

/// The diff from `old` to `new` and what it does to the running box.
pub fn compare(old: &Config, new: &Config) -> (Vec<Diff>, Effect) {
    let mut diff = Vec::new();
    let mut effect = Effect::default();
    let mut setting_changes: Vec<_> = settings(old)
        .into_iter()
        .zip(settings(new))
        .filter(|(a, b)| a.1 != b.1)
        .map(|((key, from), (_, to))| (key.to_string(), Some(from), Some(to)))
        .collect();
    setting_changes.extend(oidc_changes(&old.oidc, &new.oidc));
    setting_changes.extend(mqtt_changes(old.mqtt.as_ref(), new.mqtt.as_ref()));
    setting_changes.extend(archive_changes(&old.archive, &new.archive));
    // The camera port's servers start again with it; its cameras keep their addresses.
    setting_changes.extend(group_changes(
        "camera_port",
        old.camera_port.as_ref().map(camera_port_fields),
        new.camera_port.as_ref().map(camera_port_fields),
        ("", false),
    ));
    if !setting_changes.is_empty() {
        let (live, restart): (Vec<String>, Vec<String>) =
            setting_changes.iter().map(|(k, ..)| k.clone()).partition(|k| {
                LIVE_SETTINGS.contains(&k.as_str())
                    || k.starts_with("oidc.")
                    || k.starts_with("mqtt.")
                    || k.starts_with("archive.")
                    || k.starts_with("camera_port.")
            });
        (effect.live, effect.restart_box) = (live, restart);
        diff.push(Diff { camera: None, what: "changed", fields: setting_changes });
    }
    for c in &old.cameras {
        if !new.cameras.iter().any(|n| n.name == c.name) {
            effect.stop.push(c.name.clone());
            diff.push(Diff { camera: Some(c.name.clone()), what: "removed", fields: Vec::new() });
        }
    }
    for n in &new.cameras {
        let Some(o) = old.cameras.iter().find(|o| o.name == n.name) else {
            effect.start.push(n.name.clone());
            let fields =
                camera_fields(n).into_iter().filter(|(_, v)| v.is_some()).map(|(k, v)| (k.into(), None, v)).collect();
            diff.push(Diff { camera: Some(n.name.clone()), what: "added", fields });
            continue;
        };
        if o == n {
            continue;
        }
        let mut fields: Vec<_> = camera_fields(o)
            .into_iter()
            .zip(camera_fields(n))
            .filter(|(a, b)| a.1 != b.1)
            .map(|((k, from), (_, to))| (k.to_string(), from, to))
            .collect();
        // A new password shows as changed, never as itself.
        if o.password.is_some() && n.password.is_some() && o.password != n.password {
            fields.push(("password".into(), Some("set".into()), Some("changed".into())));
        }
        effect.restart.push(n.name.clone());
        diff.push(Diff { camera: Some(n.name.clone()), what: "changed", fields });
    }
    (diff, effect)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"data_dir = "/data"
[retention]
stream_max_bytes = "1 GiB"
total_max_bytes = "4 GiB"
[[cameras]]
name = "porch"
main = { url = "rtsp://192.0.2.1/main" }
[[cameras]]
name = "yard"
username = "admin"
password = "hunter2-old"
main = { url = "rtsp://192.0.2.2/main" }
"#;

    fn plan_of(json: &str) -> Result<Plan, Refused> {
        let current = Config::parse(FILE, "keeppeek.toml", Path::new("/")).unwrap();
        let set = ChangeSet::decode(json.as_bytes())?;
        // Revision 1 is kept (the same file), none other.
        plan(&current, FILE, &set, |rev| (rev == 1).then(|| FILE.to_string()), "keeppeek.toml", Path::new("/"))
    }

    #[test]
    fn a_plan_diffs_per_camera_without_secrets_and_says_what_restarts() {
        let p = plan_of(
            r#"{"base":1,"changes":[
                {"op":"change_camera","name":"yard","set":{"password":"hunter2-new","record":"events"}},
                {"op":"add_camera","name":"gate","set":{"main":{"url":"rtsp://192.0.2.3/a"},"username":"u","password":"hunter2-gate"}},
                {"op":"remove_camera","name":"porch"}]}"#,
        )
        .unwrap();
        assert_eq!(
            p.effect,
            Effect {
                stop: vec!["porch".into()],
                restart: vec!["yard".into()],
                start: vec!["gate".into()],
                restart_box: vec![],
                live: vec![],
            }
        );
        let answer = p.answer().to_string();
        assert!(!answer.contains("hunter2"), "{answer}");
        assert!(!p.summary().join("\n").contains("hunter2"));
        assert!(answer.contains(r#"["password","set","changed"]"#), "{answer}");
        assert!(answer.contains(r#"["record","continuous","events"]"#), "{answer}");
        assert!(p.text.contains("hunter2-new"), "the file has it");
    }

    #[test]
    fn settings_restart_the_box_and_a_budget_that_does_not_fit_is_refused() {
        let p = plan_of(r#"{"base":1,"changes":[{"op":"set","key":"webrtc.port","value":9000}]}"#).unwrap();
        assert_eq!(p.effect.restart_box, ["webrtc.port"]);
        // The retention caps are taken live.
        let p = plan_of(r#"{"base":1,"changes":[{"op":"set","key":"retention.stream_max_bytes","value":"2 GiB"}]}"#)
            .unwrap();
        assert_eq!(
            (p.effect.restart_box.len(), p.effect.live.as_slice()),
            (0, &["retention.stream_max_bytes".to_string()][..])
        );
        let (field, why) =
            plan_of(r#"{"base":1,"changes":[{"op":"set","key":"ram_class","value":"64 MiB"}]}"#).err().unwrap();
        assert_eq!(field, "budget", "{why}");
        assert!(why.contains("MiB more than"), "{why}");
        let (field, _) =
            plan_of(r#"{"base":1,"changes":[{"op":"set","key":"retention.nope","value":1}]}"#).err().unwrap();
        assert_eq!(field, "retention.nope", "the validator names the unknown key");
        let (field, _) = plan_of(
            r#"{"base":1,"changes":[{"op":"change_camera","name":"porch","set":{"main":{"url":"rtsp://u:p@192.0.2.1/"}}}]}"#,
        )
        .err()
        .unwrap();
        assert_eq!(field, "cameras[0].main.url");
        let (field, _) = plan_of(r#"{"base":1,"changes":[{"op":"rollback","to":7}]}"#).err().unwrap();
        assert_eq!(field, "changes[0].to");
    }

    #[test]
    fn the_broker_is_set_changed_and_removed_live_its_password_never_shown() {
        let set = r#"{"base":1,"changes":[{"op":"set","key":"mqtt.host","value":"broker.lan"},
            {"op":"set","key":"mqtt.username","value":"nvr"},{"op":"set","key":"mqtt.password","value":"hunter2-mqtt"}]}"#;
        let p = plan_of(set).unwrap();
        assert!(p.effect.restart_box.is_empty(), "{:?}", p.effect);
        assert!(
            p.effect.live.contains(&"mqtt.host".to_string()) && p.effect.live.contains(&"mqtt.password".to_string())
        );
        let answer = p.answer().to_string();
        assert!(!answer.contains("hunter2"), "{answer}");
        assert!(
            answer.contains(r#"["mqtt.password",null,"set"]"#) || answer.contains(r#"["mqtt.password","none","set"]"#),
            "{answer}"
        );
        assert!(answer.contains(r#""broker.lan""#), "{answer}");
        assert!(p.text.contains("hunter2-mqtt"), "the file has it");
        assert!(!answer.contains("mqtt.ca_pem"), "a field the broker does not have is not listed: {answer}");
    }

    #[test]
    fn no_change_is_an_empty_plan() {
        let p =
            plan_of(r#"{"base":1,"changes":[{"op":"change_camera","name":"porch","set":{"record":"continuous"}}]}"#)
                .unwrap();
        assert!(p.diff.is_empty());
        assert_eq!(p.effect, Effect::default());
    }
}
