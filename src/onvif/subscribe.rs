//! Following one camera's events: a PullPoint subscription made, pulled, renewed, made again
//! when the camera forgets it (it restarted, it expired), and ended with Unsubscribe when the
//! camera goes (cameras cap their subscriptions).
//!
//! Each pull waits at most [`limits::ONVIF_PULL_WAIT_S`] at the camera; one that comes back
//! at once with nothing is followed by a pause, so a camera that does not wait is not asked
//! more than once per [`limits::ONVIF_PULL_MIN_INTERVAL_MS`]. The subscription asks for
//! [`limits::ONVIF_SUBSCRIPTION_S`] and is renewed at half of it; a camera that refuses
//! Renew gets a new subscription instead. Failures wait from
//! [`limits::ONVIF_RESUBSCRIBE_MIN_MS`] doubling to [`limits::ONVIF_RESUBSCRIBE_MAX_MS`].
//!
//! Requests to the events service and the subscription carry WS-Addressing's `Action` and
//! `To`, and the subscription's reference parameters, as the ONVIF core specification asks
//! (cameras route PullMessages by them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
// tokio's clock, so the tests may pause it; the same as the system's otherwise.
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::device::{date_time, rehost};
use super::events::{self, CameraEvent};
use super::soap::{Credentials, call, call_with};
use super::{Failure, xml};
use crate::limits;

const EVENT_PORT: &str = "http://www.onvif.org/ver10/events/wsdl/EventPortType";
const PULL_POINT: &str = "http://www.onvif.org/ver10/events/wsdl/PullPointSubscription";
const MANAGER: &str = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager";

/// Where a camera's events are asked for, and as whom.
#[derive(Clone)]
pub struct Camera {
    pub device: url::Url,
    pub user: String,
    pub password: String,
}

/// What the follower says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Subscribing,
    Subscribed,
    /// The last failure, and when the next try is.
    Failed(String),
}

/// A camera whose events are followed: how it goes, for the API, `/metrics` and the
/// Integrations page.
pub struct Follower {
    pub camera: String,
    pub status: watch::Receiver<Status>,
    /// Its detections that became events (starts and ends).
    pub events: AtomicU64,
    /// Its detections dropped because the intake's queue was full
    /// ([`limits::ONVIF_EVENTS_QUEUED_MAX`]).
    pub dropped: AtomicU64,
}

impl Follower {
    /// A follower of `camera` and the sender its status is told through.
    pub fn new(camera: &str) -> (Arc<Follower>, watch::Sender<Status>) {
        let (tx, status) = watch::channel(Status::Subscribing);
        let f = Follower { camera: camera.to_string(), status, events: AtomicU64::new(0), dropped: AtomicU64::new(0) };
        (Arc::new(f), tx)
    }

    /// The queue between the follower and the intake, at most
    /// [`limits::ONVIF_EVENTS_QUEUED_MAX`] detections.
    pub fn queue() -> (mpsc::Sender<CameraEvent>, mpsc::Receiver<CameraEvent>) {
        mpsc::channel(limits::ONVIF_EVENTS_QUEUED_MAX)
    }

    /// Hands a detection to the intake's queue; when it is full the detection is dropped,
    /// counted and logged (the camera's events go on; the intake is behind).
    pub fn offer(&self, queue: &mpsc::Sender<CameraEvent>, e: CameraEvent) {
        if queue.try_send(e).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            warn!(camera = %self.camera, "ONVIF events: one dropped, the intake is behind");
        }
    }
}

/// The cameras whose events are followed now.
#[derive(Default)]
pub struct Followers {
    list: Mutex<Vec<Arc<Follower>>>,
}

impl Followers {
    /// Adds `f` (a camera started).
    pub fn add(&self, f: Arc<Follower>) {
        self.list.lock().expect("lock").push(f);
    }

    /// Removes `f` once its camera stopped (not a newer follower of the same camera).
    pub fn remove(&self, f: &Arc<Follower>) {
        self.list.lock().expect("lock").retain(|x| !Arc::ptr_eq(x, f));
    }

    /// Every follower, by camera name.
    pub fn all(&self) -> Vec<Arc<Follower>> {
        let mut all = self.list.lock().expect("lock").clone();
        all.sort_by(|a, b| a.camera.cmp(&b.camera));
        all
    }
}

fn read<T>(text: &str, f: impl FnOnce(roxmltree::Node) -> Result<T, String>) -> Result<T, Failure> {
    let doc = xml::parse(text).map_err(Failure::NotOnvif)?;
    let body = xml::body(&doc).map_err(Failure::NotOnvif)?;
    f(body).map_err(Failure::NotOnvif)
}

/// One subscription's life.
struct Subscription {
    address: url::Url,
    /// Its reference parameters, sent back with every request to it.
    parameters: Vec<events::Parameter>,
    skew_s: i64,
    renew_at: Instant,
}

impl Subscription {
    /// Calls `operation` on the subscription, with its WS-Addressing headers.
    async fn call(
        &self,
        cam: &Camera,
        namespace: &str,
        operation: &'static str,
        now_s: i64,
        body: &str,
    ) -> Result<String, Failure> {
        let who = Credentials { user: &cam.user, password: &cam.password, skew_s: self.skew_s };
        let to = self.address.as_str();
        call_with(&self.address, namespace, operation, Some(&who), now_s, body, |action| {
            events::addressing(action, to, &self.parameters)
        })
        .await
    }
}

/// The next wait after a failure: double the last, at most [`limits::ONVIF_RESUBSCRIBE_MAX_MS`].
fn next_wait_ms(ms: u64) -> u64 {
    (ms * 2).min(limits::ONVIF_RESUBSCRIBE_MAX_MS)
}

/// Makes a subscription: the camera's clock, its events service, CreatePullPointSubscription.
async fn subscribe(cam: &Camera, now_s: &impl Fn() -> i64) -> Result<Subscription, Failure> {
    let host = cam.device.host_str().ok_or_else(|| Failure::Unreachable("the address has no host".into()))?.to_string();
    let skew_s =
        match call(&cam.device, xml::TDS, "GetSystemDateAndTime", None, now_s(), "<tds:GetSystemDateAndTime/>").await {
            Ok(text) => read(&text, date_time).map(|t| t - now_s()).unwrap_or(0),
            Err(Failure::Credentials | Failure::Device(..)) => 0,
            Err(e) => return Err(e),
        };
    let who = Credentials { user: &cam.user, password: &cam.password, skew_s };
    let body = "<tds:GetCapabilities><tds:Category>Events</tds:Category></tds:GetCapabilities>";
    let text = call(&cam.device, xml::TDS, "GetCapabilities", Some(&who), now_s(), body).await?;
    let service = read(&text, |b| Ok(events::events_address(b)))?
        .ok_or_else(|| Failure::Device("GetCapabilities", "the camera has no events service".into()))?;
    let service = rehost(&service, &host, &["http", "https"]).map_err(Failure::NotOnvif)?;
    let body = events::create_body(limits::ONVIF_SUBSCRIPTION_S);
    let to = service.to_string();
    let text = call_with(&service, EVENT_PORT, "CreatePullPointSubscriptionRequest", Some(&who), now_s(), &body, |a| {
        events::addressing(a, &to, &[])
    })
    .await?;
    let reference = events::read_subscription_answer(&text).map_err(Failure::NotOnvif)?;
    let address = rehost(&reference.address, &host, &["http", "https"]).map_err(Failure::NotOnvif)?;
    let renew_at = Instant::now() + Duration::from_secs(limits::ONVIF_SUBSCRIPTION_S / 2);
    Ok(Subscription { address, parameters: reference.parameters, skew_s, renew_at })
}

/// Follows `cam`'s events until `stop` turns true, handing each to `sink`; `status` says how
/// it goes. Unsubscribes on the way out.
pub async fn follow(
    cam: Camera,
    now_s: impl Fn() -> i64,
    mut sink: impl FnMut(CameraEvent),
    status: watch::Sender<Status>,
    mut stop: watch::Receiver<bool>,
) {
    let mut wait_ms = limits::ONVIF_RESUBSCRIBE_MIN_MS;
    loop {
        status.send_replace(Status::Subscribing);
        let made = tokio::select! {
            r = subscribe(&cam, &now_s) => r,
            _ = stop.changed() => return,
        };
        let failure = match made {
            Ok(mut sub) => {
                info!(camera = %cam.device, "ONVIF events: subscribed");
                status.send_replace(Status::Subscribed);
                wait_ms = limits::ONVIF_RESUBSCRIBE_MIN_MS;
                let ended = tokio::select! {
                    e = pull_until_failure(&cam, &mut sub, &now_s, &mut sink) => Some(e),
                    _ = stop.changed() => None,
                };
                match ended {
                    Some(e) => e,
                    None => {
                        unsubscribe(&cam, &sub, &now_s).await;
                        return;
                    }
                }
            }
            Err(e) => e,
        };
        warn!(camera = %cam.device, error = %failure, wait_ms, "ONVIF events: subscribing again soon");
        status.send_replace(Status::Failed(failure.to_string()));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            _ = stop.changed() => return,
        }
        wait_ms = next_wait_ms(wait_ms);
    }
}

/// Pulls and renews until something fails; returns the failure.
async fn pull_until_failure(
    cam: &Camera,
    sub: &mut Subscription,
    now_s: &impl Fn() -> i64,
    sink: &mut impl FnMut(CameraEvent),
) -> Failure {
    loop {
        if Instant::now() >= sub.renew_at {
            let body = events::renew_body(limits::ONVIF_SUBSCRIPTION_S);
            match sub.call(cam, MANAGER, "RenewRequest", now_s(), &body).await {
                Ok(_) => sub.renew_at = Instant::now() + Duration::from_secs(limits::ONVIF_SUBSCRIPTION_S / 2),
                // A camera without Renew: a new subscription before this one runs out.
                Err(Failure::Device(_, why)) => {
                    debug!(camera = %cam.device, why, "ONVIF events: Renew refused, subscribing anew");
                    unsubscribe(cam, sub, now_s).await;
                    match subscribe(cam, now_s).await {
                        Ok(s) => *sub = s,
                        Err(e) => return e,
                    }
                }
                Err(e) => return e,
            }
        }
        let started = Instant::now();
        let body = events::pull_body(limits::ONVIF_PULL_WAIT_S, limits::ONVIF_EVENTS_PER_PULL_MAX);
        let text = match sub.call(cam, PULL_POINT, "PullMessagesRequest", now_s(), &body).await {
            Ok(t) => t,
            Err(e) => return e,
        };
        let got = match events::read_pull_answer(&text) {
            Ok(g) => g,
            Err(why) => return Failure::NotOnvif(why),
        };
        let quiet = got.is_empty();
        for mut e in got {
            // The camera's clock, as the box's.
            e.utc_us = e.utc_us.map(|u| u - sub.skew_s * 1_000_000);
            sink(e);
        }
        let floor = Duration::from_millis(limits::ONVIF_PULL_MIN_INTERVAL_MS);
        if quiet || started.elapsed() < floor {
            tokio::time::sleep(floor.saturating_sub(started.elapsed())).await;
        }
    }
}

/// Ends a subscription (cameras cap how many they keep); a failure is only logged.
async fn unsubscribe(cam: &Camera, sub: &Subscription, now_s: &impl Fn() -> i64) {
    let body = events::unsubscribe_body();
    if let Err(e) = sub.call(cam, MANAGER, "UnsubscribeRequest", now_s(), &body).await {
        debug!(camera = %cam.device, error = %e, "ONVIF events: Unsubscribe failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onvif::events::tests::{answer, message};
    use std::collections::HashSet;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the fake camera was asked: the action, the request's text, when.
    type Asked = Vec<(String, String, Instant)>;

    /// A camera's events service as the ONVIF core specification describes it, with a
    /// subscription id among each subscription's reference parameters; `forget` empties its
    /// subscriptions as a restart does.
    #[derive(Default)]
    struct Fake {
        alive: HashSet<u32>,
        made: u32,
        pulled: HashSet<u32>,
        asked: Asked,
        /// A camera without Renew: it answers with a fault.
        refuses_renew: bool,
    }

    fn envelope(body: &str) -> String {
        format!(
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:tds="http://www.onvif.org/ver10/device/wsdl" xmlns:tt="http://www.onvif.org/ver10/schema" xmlns:tev="{}" xmlns:a="{}" xmlns:v="urn:fake"><s:Body>{body}</s:Body></s:Envelope>"#,
            events::TEV,
            events::WSA5
        )
    }

    fn fault(why: &str) -> String {
        envelope(&format!(
            r#"<s:Fault><s:Code><s:Value>s:Receiver</s:Value></s:Code><s:Reason><s:Text xml:lang="en">{why}</s:Text></s:Reason></s:Fault>"#
        ))
    }

    /// The subscription id in a request's headers, if its `To` names the subscription too.
    fn subscription_of(request: &str) -> Option<u32> {
        let doc = xml::parse(request).ok()?;
        let header = doc.root_element().first_element_child()?;
        let to = xml::text(xml::child(header, events::WSA5, "To")?);
        let id: u32 = xml::text(xml::child(header, "urn:fake", "SubscriptionId")?).parse().ok()?;
        (to.ends_with(&format!("/subscription?id={id}"))).then_some(id)
    }

    fn answer_to(fake: &Mutex<Fake>, port: u16, action: &str, request: &str) -> (u16, String) {
        let mut f = fake.lock().unwrap();
        f.asked.push((action.to_string(), request.to_string(), Instant::now()));
        let op = action.rsplit('/').next().unwrap_or("");
        match op {
            "GetSystemDateAndTime" => (500, fault("no clock here")),
            "GetCapabilities" => (
                200,
                envelope(&format!(
                    "<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Events><tt:XAddr>http://127.0.0.1:{port}/events</tt:XAddr></tt:Events></tds:Capabilities></tds:GetCapabilitiesResponse>"
                )),
            ),
            "CreatePullPointSubscriptionRequest" => {
                f.made += 1;
                let id = f.made;
                f.alive.insert(id);
                (
                    200,
                    envelope(&format!(
                        "<tev:CreatePullPointSubscriptionResponse><tev:SubscriptionReference><a:Address>http://127.0.0.1:{port}/subscription?id={id}</a:Address><a:ReferenceParameters><v:SubscriptionId>{id}</v:SubscriptionId></a:ReferenceParameters></tev:SubscriptionReference></tev:CreatePullPointSubscriptionResponse>"
                    )),
                )
            }
            "PullMessagesRequest" => match subscription_of(request) {
                Some(id) if f.alive.contains(&id) => {
                    // Motion once per subscription, then nothing, answered at once (a camera
                    // that does not wait).
                    let first = f.pulled.insert(id);
                    let messages = if first {
                        message(
                            "tns1:VideoSource/MotionAlarm",
                            "2026-12-05T10:00:01Z",
                            "Changed",
                            r#"<tt:SimpleItem Name="State" Value="true"/>"#,
                        )
                    } else {
                        String::new()
                    };
                    (200, answer(&messages))
                }
                _ => (500, fault("no such subscription")),
            },
            "RenewRequest" if f.refuses_renew => (500, fault("Renew is not supported")),
            "RenewRequest" => match subscription_of(request) {
                Some(id) if f.alive.contains(&id) => (
                    200,
                    envelope(
                        "<wsnt:RenewResponse xmlns:wsnt=\"http://docs.oasis-open.org/wsn/b-2\"><wsnt:TerminationTime>2026-12-05T10:01:00Z</wsnt:TerminationTime></wsnt:RenewResponse>",
                    ),
                ),
                _ => (500, fault("no such subscription")),
            },
            "UnsubscribeRequest" => {
                if let Some(id) = subscription_of(request) {
                    f.alive.remove(&id);
                }
                (200, envelope("<wsnt:UnsubscribeResponse xmlns:wsnt=\"http://docs.oasis-open.org/wsn/b-2\"/>"))
            }
            _ => (500, fault("not here")),
        }
    }

    /// Serves the fake camera: one request per connection, as the box's client makes them.
    async fn serve(fake: Arc<Mutex<Fake>>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let fake = fake.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let (head, body_len) = loop {
                        let mut chunk = [0u8; 4096];
                        let n = s.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_string();
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap())
                                })
                                .unwrap_or(0);
                            buf.drain(..end + 4);
                            break (head, len);
                        }
                    };
                    while buf.len() < body_len {
                        let mut chunk = [0u8; 4096];
                        let n = s.read(&mut chunk).await.unwrap();
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let action =
                        head.split("action=\"").nth(1).and_then(|a| a.split('"').next()).unwrap_or("").to_string();
                    let (status, text) = answer_to(&fake, port, &action, &String::from_utf8_lossy(&buf));
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/soap+xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        port
    }

    fn asked(fake: &Mutex<Fake>, op: &str) -> Vec<(String, Instant)> {
        let f = fake.lock().unwrap();
        f.asked.iter().filter(|(a, _, _)| a.ends_with(op)).map(|(_, r, t)| (r.clone(), *t)).collect()
    }

    #[tokio::test]
    async fn detections_past_the_intakes_queue_are_dropped_and_counted() {
        let (f, _status) = Follower::new("porch");
        let (tx, mut rx) = Follower::queue();
        let e = CameraEvent { label: "motion", active: true, utc_us: None, initial: false };
        for _ in 0..limits::ONVIF_EVENTS_QUEUED_MAX + 3 {
            f.offer(&tx, e.clone());
        }
        assert_eq!(f.dropped.load(Ordering::Relaxed), 3);
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, limits::ONVIF_EVENTS_QUEUED_MAX);
        // Room again once the intake has taken them.
        f.offer(&tx, e);
        assert_eq!(f.dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_stopped_cameras_follower_goes_and_not_its_successor() {
        let followers = Followers::default();
        let (old, _a) = Follower::new("porch");
        let (yard, _b) = Follower::new("yard");
        followers.add(yard);
        followers.add(old.clone());
        // The camera changed: its new follower starts before the old one has ended.
        let (new, _c) = Follower::new("porch");
        followers.add(new.clone());
        followers.remove(&old);
        let all = followers.all();
        assert_eq!(all.iter().map(|f| f.camera.as_str()).collect::<Vec<_>>(), ["porch", "yard"]);
        assert!(Arc::ptr_eq(&all[0], &new));
    }

    /// Follows the fake camera on tokio's paused clock for `seconds`, then stops.
    async fn follow_for(fake: &Arc<Mutex<Fake>>, seconds: u64) {
        let port = serve(fake.clone()).await;
        let cam = Camera {
            device: format!("http://127.0.0.1:{port}/onvif/device_service").parse().unwrap(),
            user: "admin".into(),
            password: "pw".into(),
        };
        let (status, _status_rx) = watch::channel(Status::Subscribing);
        let (stop_tx, stop) = watch::channel(false);
        let follower = tokio::spawn(follow(cam, || 1_796_464_800, |_| {}, status, stop));
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop_tx.send(true).unwrap();
        follower.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_is_renewed_at_half_its_time_or_made_anew_where_renew_is_refused() {
        let half = limits::ONVIF_SUBSCRIPTION_S / 2;
        // A camera that renews: one subscription, renewed for the whole time again at each
        // half, addressed like every request to it.
        let fake = Arc::new(Mutex::new(Fake::default()));
        follow_for(&fake, half * 2 + half / 2).await;
        let made = asked(&fake, "CreatePullPointSubscriptionRequest");
        let renewed = asked(&fake, "RenewRequest");
        assert_eq!(made.len(), 1);
        assert_eq!(renewed.len(), 2, "renewed at {half} s and {} s", half * 2);
        for (i, (body, at)) in renewed.iter().enumerate() {
            let since = (*at - made[0].1).as_secs_f64();
            let want = (half * (i as u64 + 1)) as f64;
            assert!(since >= want && since < want + 1.5, "renewal {i} at {since} s, not {want} s");
            assert!(body.contains(&format!("PT{}S", limits::ONVIF_SUBSCRIPTION_S)) && subscription_of(body) == Some(1));
        }
        // A camera that refuses Renew: the old subscription ended and a new one made, in time.
        let fake = Arc::new(Mutex::new(Fake { refuses_renew: true, ..Fake::default() }));
        follow_for(&fake, half + half / 2).await;
        let made = asked(&fake, "CreatePullPointSubscriptionRequest");
        assert_eq!(made.len(), 2, "a new subscription where Renew was refused");
        let since = (made[1].1 - made[0].1).as_secs_f64();
        assert!(since >= half as f64 && since < half as f64 + 1.5, "made anew at {since} s");
        let gone: Vec<Option<u32>> =
            asked(&fake, "UnsubscribeRequest").iter().map(|(r, _)| subscription_of(r)).collect();
        assert_eq!(gone, [Some(1), Some(2)], "the refused one ended, then the last at the stop");
        assert!(fake.lock().unwrap().alive.is_empty());
    }

    #[test]
    fn the_wait_after_failures_doubles_to_its_ceiling() {
        let mut ms = limits::ONVIF_RESUBSCRIBE_MIN_MS;
        let mut waits = vec![ms];
        while ms < limits::ONVIF_RESUBSCRIBE_MAX_MS {
            ms = next_wait_ms(ms);
            waits.push(ms);
        }
        assert_eq!(next_wait_ms(ms), limits::ONVIF_RESUBSCRIBE_MAX_MS, "stays at the ceiling: {waits:?}");
        assert!(waits.windows(2).all(|w| w[1] == (w[0] * 2).min(limits::ONVIF_RESUBSCRIBE_MAX_MS)));
    }

    #[tokio::test]
    async fn a_camera_that_restarts_is_subscribed_again_and_its_pulls_are_paced_and_addressed() {
        let fake = Arc::new(Mutex::new(Fake::default()));
        let port = serve(fake.clone()).await;
        let cam = Camera {
            device: format!("http://127.0.0.1:{port}/onvif/device_service").parse().unwrap(),
            user: "admin".into(),
            password: "pw".into(),
        };
        let (status, mut status_rx) = watch::channel(Status::Subscribing);
        let (stop_tx, stop) = watch::channel(false);
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let now_s = || 1_796_464_800;
        let follower = tokio::spawn(follow(cam, now_s, move |e| seen_tx.send(e).unwrap(), status, stop));

        // Subscribed for ONVIF_SUBSCRIPTION_S; the motion of its first pull comes through. (The
        // waits are generous: the aarch64 run is emulated beside the other tests.)
        let e = tokio::time::timeout(Duration::from_secs(20), seen.recv()).await.unwrap().unwrap();
        assert_eq!((e.label, e.active), ("motion", true));
        let made = asked(&fake, "CreatePullPointSubscriptionRequest");
        assert_eq!(made.len(), 1);
        assert!(made[0].0.contains(&format!("PT{}S", limits::ONVIF_SUBSCRIPTION_S)), "{}", made[0].0);
        assert!(
            made[0]
                .0
                .contains(&format!("<wsa:To xmlns:wsa=\"{}\">http://127.0.0.1:{port}/events</wsa:To>", events::WSA5))
        );
        // Pulls ask the camera to wait ONVIF_PULL_WAIT_S; one answered at once with nothing is
        // followed by a pause, so they come at most once per ONVIF_PULL_MIN_INTERVAL_MS.
        let floor = Duration::from_millis(limits::ONVIF_PULL_MIN_INTERVAL_MS);
        tokio::time::sleep(floor * 3 + floor / 2).await;
        let pulls = asked(&fake, "PullMessagesRequest");
        // At most one per interval; a slow run may make fewer, never more.
        assert!((2..=5).contains(&pulls.len()), "{} pulls in 3.5 intervals", pulls.len());
        assert!(pulls.iter().all(|(r, _)| r.contains(&format!("PT{}S", limits::ONVIF_PULL_WAIT_S)) && subscription_of(r) == Some(1)));
        // Seen by the camera, each pull's time carries the network's and the camera's delays
        // (up to a tenth of a second on the emulated aarch64 run beside the other tests); a
        // follower that did not pause would pull again within milliseconds.
        for w in pulls.windows(2).skip(1) {
            assert!(w[1].1 - w[0].1 >= floor * 3 / 4, "pulls {:?} apart", w[1].1 - w[0].1);
        }

        // The camera restarts: it forgets the subscription. The next pull fails, the follower
        // says so, waits ONVIF_RESUBSCRIBE_MIN_MS, subscribes again and hears the motion of
        // the new subscription.
        fake.lock().unwrap().alive.clear();
        let failed_at = loop {
            status_rx.changed().await.unwrap();
            if let Status::Failed(why) = &*status_rx.borrow_and_update() {
                assert!(why.contains("no such subscription"), "{why}");
                break Instant::now();
            }
        };
        let e = tokio::time::timeout(Duration::from_millis(limits::ONVIF_RESUBSCRIBE_MIN_MS + 20_000), seen.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((e.label, e.active), ("motion", true));
        let made = asked(&fake, "CreatePullPointSubscriptionRequest");
        assert_eq!(made.len(), 2);
        let waited = made[1].1 - failed_at;
        assert!(
            waited >= Duration::from_millis(limits::ONVIF_RESUBSCRIBE_MIN_MS - 50),
            "subscribed again after {waited:?}"
        );
        assert_eq!(subscription_of(&asked(&fake, "PullMessagesRequest").last().unwrap().0), Some(2));

        // Stopped: the subscription is ended at the camera.
        stop_tx.send(true).unwrap();
        follower.await.unwrap();
        let gone = asked(&fake, "UnsubscribeRequest");
        assert_eq!(gone.len(), 1);
        assert_eq!(subscription_of(&gone[0].0), Some(2));
        assert!(fake.lock().unwrap().alive.is_empty());
    }
}
