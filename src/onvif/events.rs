//! A camera's own events over ONVIF's PullPoint: the requests (CreatePullPointSubscription,
//! PullMessages, Renew, Unsubscribe) and the reading of what comes back, notifications
//! turned into what KeepPeek keeps: a label, whether it started or ended, and when.
//!
//! Topics differ by vendor (`tns1:RuleEngine/CellMotionDetector/Motion`,
//! `tns1:VideoSource/MotionAlarm`, `tns1:RuleEngine/MyRuleDetector/PeopleDetect`,
//! `tns1:RuleEngine/FieldDetector/ObjectsInside`, `tns1:Device/Trigger/DigitalInput` …), and so
//! do the data items that say on or off (`IsMotion`, `State`, `LogicalState`, `IsInside`,
//! `IsPeople` …): [`label_of`] maps a topic's last levels to a label by the words in them,
//! and [`state_of`] takes the first boolean data item. Everything is read by namespace, with
//! the ceilings of [`super::xml`], at most [`limits::ONVIF_EVENTS_PER_PULL_MAX`] messages.

use roxmltree::Node;

use super::xml;
use crate::limits;

pub const TEV: &str = "http://www.onvif.org/ver10/events/wsdl";
pub const WSNT: &str = "http://docs.oasis-open.org/wsn/b-2";
pub const WSA5: &str = "http://www.w3.org/2005/08/addressing";

/// One notification as the camera sent it, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The topic's levels, prefixes taken off (`RuleEngine/CellMotionDetector/Motion`).
    pub topic: String,
    /// `UtcTime`, as UTC µs (none when missing or unreadable).
    pub utc_us: Option<i64>,
    /// `Initialized` (the state at subscription), `Changed` or `Deleted`.
    pub operation: String,
    /// Source items (`VideoSourceConfigurationToken`, `Rule` …), name and value.
    pub source: Vec<(String, String)>,
    /// Data items (`IsMotion`, `State` …), name and value.
    pub data: Vec<(String, String)>,
}

/// What KeepPeek makes of a notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CameraEvent {
    pub label: &'static str,
    /// True: it started (or is on); false: it ended.
    pub active: bool,
    pub utc_us: Option<i64>,
    /// The state at subscription, not a change.
    pub initial: bool,
}

/// Items kept per part of a message.
const ITEMS_MAX: usize = 8;
/// Characters of a topic kept.
const TOPIC_MAX_CHARS: usize = 256;

/// The notifications in a PullMessages answer's body.
pub fn notifications(body: Node) -> Result<Vec<Notification>, String> {
    let answer = xml::child(body, TEV, "PullMessagesResponse").ok_or("not a PullMessagesResponse")?;
    let mut out = Vec::new();
    for m in answer.children().filter(|c| xml::is(*c, WSNT, "NotificationMessage")) {
        if out.len() >= limits::ONVIF_EVENTS_PER_PULL_MAX {
            break;
        }
        let topic = xml::child(m, WSNT, "Topic").map(|t| topic_levels(&xml::text(t))).unwrap_or_default();
        let Some(message) = xml::child(m, WSNT, "Message").and_then(|w| xml::child(w, xml::TT, "Message")) else {
            continue;
        };
        let items = |part: &str| -> Vec<(String, String)> {
            xml::child(message, xml::TT, part)
                .map(|p| {
                    p.children()
                        .filter(|c| xml::is(*c, xml::TT, "SimpleItem"))
                        .take(ITEMS_MAX)
                        .map(|i| (short(i.attribute("Name")), short(i.attribute("Value"))))
                        .collect()
                })
                .unwrap_or_default()
        };
        out.push(Notification {
            topic,
            utc_us: message.attribute("UtcTime").and_then(parse_utc),
            operation: short(message.attribute("PropertyOperation")),
            source: items("Source"),
            data: items("Data"),
        });
    }
    Ok(out)
}

fn short(v: Option<&str>) -> String {
    v.unwrap_or("").trim().chars().take(64).collect()
}

/// `tns1:RuleEngine/tnsvendor:Cell/Motion` → `RuleEngine/Cell/Motion`.
pub fn topic_levels(text: &str) -> String {
    text.trim()
        .chars()
        .take(TOPIC_MAX_CHARS)
        .collect::<String>()
        .split('/')
        .map(|level| level.rsplit(':').next().unwrap_or(level))
        .collect::<Vec<_>>()
        .join("/")
}

/// The label a topic stands for, by the words in its levels; none for topics that are not
/// about something seen (a relay, a configuration change …).
pub fn label_of(topic: &str) -> Option<&'static str> {
    let t = topic.to_ascii_lowercase();
    let has = |w: &str| t.contains(w);
    if has("people") || has("person") || has("human") || has("face") {
        Some("person")
    } else if has("vehicle") || has("car") || has("licenseplate") {
        Some("vehicle")
    } else if has("animal") || has("pet") {
        Some("animal")
    } else if has("linedetector") || has("linecross") || has("crossed") {
        Some("line crossed")
    } else if has("fielddetector") || has("intrusion") || has("objectsinside") || has("region") {
        Some("intrusion")
    } else if has("tamper") {
        Some("tamper")
    } else if has("motion") {
        Some("motion")
    } else if has("digitalinput") {
        Some("input")
    } else if has("audio") && (has("detect") || has("alarm")) {
        Some("sound")
    } else {
        None
    }
}

/// The first data item that reads as a boolean (`true`/`false`, `1`/`0`, `active`/`inactive`),
/// leaving out identifiers (`ObjectId`, `…Token`), whose values are numbers, not states.
pub fn state_of(data: &[(String, String)]) -> Option<bool> {
    let identifier = |n: &str| n.ends_with("Id") || n.ends_with("ID") || n.ends_with("Token");
    data.iter().filter(|(n, _)| !identifier(n)).find_map(|(_, v)| match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "active" | "on" => Some(true),
        "false" | "0" | "inactive" | "off" => Some(false),
        _ => None,
    })
}

/// A notification as KeepPeek's event, when it is one.
pub fn camera_event(n: &Notification) -> Option<CameraEvent> {
    let label = label_of(&n.topic)?;
    let active = state_of(&n.data)?;
    Some(CameraEvent { label, active, utc_us: n.utc_us, initial: n.operation == "Initialized" })
}

/// `YYYY-MM-DDThh:mm:ss[.fff…](Z|±hh:mm)` as UTC µs.
pub fn parse_utc(text: &str) -> Option<i64> {
    let t = text.trim();
    if t.len() < 19 || t.len() > 40 || !t.is_ascii() {
        return None;
    }
    let num = |s: &str| s.parse::<i64>().ok();
    let (y, mo, d) = (num(&t[0..4])?, num(&t[5..7])?, num(&t[8..10])?);
    let (h, mi, s) = (num(&t[11..13])?, num(&t[14..16])?, num(&t[17..19])?);
    if &t[4..5] != "-" || &t[7..8] != "-" || !matches!(&t[10..11], "T" | "t" | " ") {
        return None;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &t[19..];
    let mut frac_us = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let digits: String = f.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            return None;
        }
        let six: String = digits.chars().chain(std::iter::repeat('0')).take(6).collect();
        frac_us = num(&six)?;
        rest = &f[digits.len()..];
    }
    let offset_s = match rest {
        "" | "Z" | "z" => 0,
        o if o.len() == 6 && matches!(&o[0..1], "+" | "-") && &o[3..4] == ":" => {
            let v = num(&o[1..3])? * 3600 + num(&o[4..6])? * 60;
            if &o[0..1] == "-" { -v } else { v }
        }
        _ => return None,
    };
    let days = crate::clock::days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    Some(secs * 1_000_000 + frac_us)
}

/// The body of CreatePullPointSubscription, asking for `termination_s` seconds.
pub fn create_body(termination_s: u64) -> String {
    format!(
        r#"<tev:CreatePullPointSubscription xmlns:tev="{TEV}"><tev:InitialTerminationTime>PT{termination_s}S</tev:InitialTerminationTime></tev:CreatePullPointSubscription>"#
    )
}

/// The subscription's address and reference parameters from a CreatePullPointSubscription
/// answer's body.
pub fn subscription_address(body: Node) -> Result<Reference, String> {
    let answer = xml::child(body, TEV, "CreatePullPointSubscriptionResponse").ok_or("not a subscription answer")?;
    let reference = xml::child(answer, TEV, "SubscriptionReference").ok_or("no SubscriptionReference")?;
    let address = [WSA5, xml::WSA]
        .into_iter()
        .find_map(|ns| xml::child(reference, ns, "Address"))
        .map(xml::text)
        .filter(|a| !a.is_empty())
        .ok_or("no subscription address")?;
    let mut parameters = Vec::new();
    let held = [WSA5, xml::WSA].into_iter().find_map(|ns| xml::child(reference, ns, "ReferenceParameters"));
    for p in held.into_iter().flat_map(|h| h.children()).filter(|n| n.is_element()) {
        // Only elements that hold text: what cameras put there (a subscription's id).
        if p.children().any(|c| c.is_element()) || parameters.len() == REFERENCE_PARAMETERS_MAX {
            continue;
        }
        let name = p.tag_name();
        parameters.push(Parameter {
            namespace: name.namespace().unwrap_or("").chars().take(200).collect(),
            local: name.name().chars().take(64).collect(),
            text: xml::text(p).chars().take(200).collect(),
        });
    }
    Ok(Reference { address, parameters })
}

/// Reference parameters kept from a subscription's answer; the rest are ignored.
const REFERENCE_PARAMETERS_MAX: usize = 4;

/// A subscription's endpoint reference: where to send, and what to send with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub address: String,
    /// WS-Addressing reference parameters (e.g. a subscription id): each goes back as a
    /// header of every request to the subscription.
    pub parameters: Vec<Parameter>,
}

/// One reference parameter: an element holding text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub namespace: String,
    pub local: String,
    pub text: String,
}

/// The WS-Addressing headers of a request to `to` (with `action`), with the reference's
/// parameters, as WS-Addressing 1.0 asks and cameras check: some route PullMessages by
/// `To`, some by a subscription id among the parameters.
pub fn addressing(action: &str, to: &str, parameters: &[Parameter]) -> String {
    let mut out = format!(
        r#"<wsa:Action xmlns:wsa="{WSA5}">{}</wsa:Action><wsa:To xmlns:wsa="{WSA5}">{}</wsa:To>"#,
        xml::escape(action),
        xml::escape(to)
    );
    for p in parameters {
        let local: String = p.local.chars().filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.')).collect();
        if local.is_empty() || !local.starts_with(|c: char| c.is_alphabetic() || c == '_') {
            continue;
        }
        out.push_str(&format!(
            r#"<rp:{local} xmlns:rp="{}" xmlns:wsa="{WSA5}" wsa:IsReferenceParameter="true">{}</rp:{local}>"#,
            xml::escape(&p.namespace),
            xml::escape(&p.text)
        ));
    }
    out
}

/// The body of PullMessages: wait at most `timeout_s`, at most `limit` messages.
pub fn pull_body(timeout_s: u64, limit: usize) -> String {
    format!(
        r#"<tev:PullMessages xmlns:tev="{TEV}"><tev:Timeout>PT{timeout_s}S</tev:Timeout><tev:MessageLimit>{limit}</tev:MessageLimit></tev:PullMessages>"#
    )
}

/// The body of Renew for `termination_s` more seconds.
pub fn renew_body(termination_s: u64) -> String {
    format!(
        r#"<wsnt:Renew xmlns:wsnt="{WSNT}"><wsnt:TerminationTime>PT{termination_s}S</wsnt:TerminationTime></wsnt:Renew>"#
    )
}

/// The body of Unsubscribe.
pub fn unsubscribe_body() -> String {
    format!(r#"<wsnt:Unsubscribe xmlns:wsnt="{WSNT}"/>"#)
}

/// The events service's address from a GetCapabilities answer's body, if the camera has one.
pub fn events_address(body: Node) -> Option<String> {
    let events = xml::find(body, xml::TT, "Events")?;
    xml::text_at(events, &[(xml::TT, "XAddr")]).filter(|a| !a.is_empty())
}

/// Reads a CreatePullPointSubscription answer's whole text (a fuzz target's entry): never
/// panics.
pub fn read_subscription_answer(text: &str) -> Result<Reference, String> {
    let doc = xml::parse(text)?;
    let body = xml::body(&doc)?;
    subscription_address(body)
}

/// Reads a PullMessages answer's whole text (the fuzz target's entry): never panics.
pub fn read_pull_answer(text: &str) -> Result<Vec<CameraEvent>, String> {
    let doc = xml::parse(text)?;
    let body = xml::body(&doc)?;
    Ok(notifications(body)?.iter().filter_map(camera_event).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A PullMessages answer with `messages`.
    pub(crate) fn answer(messages: &str) -> String {
        format!(
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tev="{TEV}" xmlns:wsnt="{WSNT}" xmlns:tt="http://www.onvif.org/ver10/schema" xmlns:tns1="http://www.onvif.org/ver10/topics"><s:Body><tev:PullMessagesResponse><tev:CurrentTime>2026-12-05T10:00:00Z</tev:CurrentTime>{messages}</tev:PullMessagesResponse></s:Body></s:Envelope>"#
        )
    }

    /// A notification on `topic` at `time`.
    pub(crate) fn message(topic: &str, time: &str, op: &str, data: &str) -> String {
        format!(
            r#"<wsnt:NotificationMessage><wsnt:Topic Dialect="http://www.onvif.org/ver10/tev/topicExpression/ConcreteSet">{topic}</wsnt:Topic><wsnt:Message><tt:Message UtcTime="{time}" PropertyOperation="{op}"><tt:Source><tt:SimpleItem Name="VideoSourceConfigurationToken" Value="VS_1"/></tt:Source><tt:Data>{data}</tt:Data></tt:Message></wsnt:Message></wsnt:NotificationMessage>"#
        )
    }

    #[test]
    fn vendors_topics_and_states_become_labels() {
        let text = answer(
            &[
                message(
                    "tns1:RuleEngine/CellMotionDetector/Motion",
                    "2026-12-05T10:00:01.250Z",
                    "Changed",
                    r#"<tt:SimpleItem Name="IsMotion" Value="true"/>"#,
                ),
                message(
                    "tns1:VideoSource/MotionAlarm",
                    "2026-12-05T10:00:02Z",
                    "Initialized",
                    r#"<tt:SimpleItem Name="State" Value="false"/>"#,
                ),
                message(
                    "tns1:RuleEngine/MyRuleDetector/PeopleDetect",
                    "2026-12-05T11:00:03+01:00",
                    "Changed",
                    r#"<tt:SimpleItem Name="IsPeople" Value="true"/>"#,
                ),
                message(
                    "tns1:RuleEngine/FieldDetector/ObjectsInside",
                    "2026-12-05T10:00:04Z",
                    "Changed",
                    r#"<tt:SimpleItem Name="IsInside" Value="1"/>"#,
                ),
                message(
                    "tns1:Device/Trigger/Relay",
                    "2026-12-05T10:00:05Z",
                    "Changed",
                    r#"<tt:SimpleItem Name="LogicalState" Value="active"/>"#,
                ),
                message(
                    "tns1:RuleEngine/CellMotionDetector/Motion",
                    "2026-12-05T10:00:06Z",
                    "Changed",
                    r#"<tt:SimpleItem Name="Level" Value="7"/>"#,
                ),
            ]
            .concat(),
        );
        let events = read_pull_answer(&text).unwrap();
        let base = parse_utc("2026-12-05T10:00:00Z").unwrap();
        assert_eq!(
            events,
            [
                CameraEvent { label: "motion", active: true, utc_us: Some(base + 1_250_000), initial: false },
                CameraEvent { label: "motion", active: false, utc_us: Some(base + 2_000_000), initial: true },
                CameraEvent { label: "person", active: true, utc_us: Some(base + 3_000_000), initial: false },
                CameraEvent { label: "intrusion", active: true, utc_us: Some(base + 4_000_000), initial: false },
            ],
            "a relay is not something seen; a data item that is no state (a level, an object's id) says nothing"
        );
    }

    #[test]
    fn times_read_and_refused() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc("1970-01-01T00:00:01.5"), Some(1_500_000));
        assert_eq!(parse_utc("1970-01-01T01:00:00+01:00"), Some(0));
        for bad in [
            "",
            "1970-13-01T00:00:00Z",
            "1970-01-01T00:00:00.Z",
            "1970-01-01X00:00:00Z",
            "1970-01-01T00:00:00+1",
            "é970-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_subscription_address_and_the_events_service_are_found() {
        let text = format!(
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tev="{TEV}" xmlns:a="{WSA5}"><s:Body><tev:CreatePullPointSubscriptionResponse><tev:SubscriptionReference><a:Address> http://cam/onvif/events/subscription_1 </a:Address></tev:SubscriptionReference></tev:CreatePullPointSubscriptionResponse></s:Body></s:Envelope>"#
        );
        let doc = xml::parse(&text).unwrap();
        let reference = subscription_address(xml::body(&doc).unwrap()).unwrap();
        assert_eq!(reference.address, "http://cam/onvif/events/subscription_1");
        assert!(reference.parameters.is_empty());
        let caps = r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tt="http://www.onvif.org/ver10/schema"><s:Body><x><tt:Events><tt:XAddr>http://cam/onvif/events</tt:XAddr></tt:Events></x></s:Body></s:Envelope>"#;
        let doc = xml::parse(caps).unwrap();
        assert_eq!(events_address(xml::body(&doc).unwrap()).as_deref(), Some("http://cam/onvif/events"));
    }

    #[test]
    fn reference_parameters_go_back_as_headers_of_every_request_to_the_subscription() {
        let text = format!(
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tev="{TEV}" xmlns:a="{WSA5}" xmlns:v="urn:vendor"><s:Body><tev:CreatePullPointSubscriptionResponse><tev:SubscriptionReference><a:Address>http://cam/events</a:Address><a:ReferenceParameters><v:SubscriptionId>7&amp;1</v:SubscriptionId><v:Nested><v:X>1</v:X></v:Nested></a:ReferenceParameters></tev:SubscriptionReference></tev:CreatePullPointSubscriptionResponse></s:Body></s:Envelope>"#
        );
        let doc = xml::parse(&text).unwrap();
        let reference = subscription_address(xml::body(&doc).unwrap()).unwrap();
        assert_eq!(
            reference.parameters,
            vec![Parameter { namespace: "urn:vendor".into(), local: "SubscriptionId".into(), text: "7&1".into() }]
        );
        let headers = addressing("urn:a/Pull", "http://cam/events?x=1&y=2", &reference.parameters);
        let envelope = crate::onvif::soap::envelope(Some(&headers), "<x/>");
        let doc = xml::parse(&envelope).unwrap();
        let header = doc.root_element().first_element_child().unwrap();
        let got: Vec<(String, String)> = header
            .children()
            .filter(|n| n.is_element())
            .map(|n| (format!("{}|{}", n.tag_name().namespace().unwrap_or(""), n.tag_name().name()), xml::text(n)))
            .collect();
        assert_eq!(
            got,
            vec![
                (format!("{WSA5}|Action"), "urn:a/Pull".to_string()),
                (format!("{WSA5}|To"), "http://cam/events?x=1&y=2".to_string()),
                ("urn:vendor|SubscriptionId".to_string(), "7&1".to_string()),
            ]
        );
        // No more than the ceiling are kept.
        let many: String = (0..10).map(|i| format!("<v:P{i}>{i}</v:P{i}>")).collect();
        let text = text.replace("<v:SubscriptionId>7&amp;1</v:SubscriptionId>", &many);
        let doc = xml::parse(&text).unwrap();
        assert_eq!(subscription_address(xml::body(&doc).unwrap()).unwrap().parameters.len(), REFERENCE_PARAMETERS_MAX);
    }

    #[test]
    fn at_most_the_ceiling_of_messages_is_read() {
        let one = message(
            "tns1:VideoSource/MotionAlarm",
            "2026-12-05T10:00:00Z",
            "Changed",
            r#"<tt:SimpleItem Name="State" Value="true"/>"#,
        );
        let text = answer(&one.repeat(limits::ONVIF_EVENTS_PER_PULL_MAX + 5));
        assert_eq!(read_pull_answer(&text).unwrap().len(), limits::ONVIF_EVENTS_PER_PULL_MAX);
    }
}
