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

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::device::{date_time, rehost};
use super::events::{self, CameraEvent};
use super::soap::{Credentials, call};
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

fn read<T>(text: &str, f: impl FnOnce(roxmltree::Node) -> Result<T, String>) -> Result<T, Failure> {
    let doc = xml::parse(text).map_err(Failure::NotOnvif)?;
    let body = xml::body(&doc).map_err(Failure::NotOnvif)?;
    f(body).map_err(Failure::NotOnvif)
}

/// One subscription's life.
struct Subscription {
    address: url::Url,
    skew_s: i64,
    renew_at: Instant,
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
    let text = call(&service, EVENT_PORT, "CreatePullPointSubscriptionRequest", Some(&who), now_s(), &body).await?;
    let address = read(&text, events::subscription_address)?;
    let address = rehost(&address, &host, &["http", "https"]).map_err(Failure::NotOnvif)?;
    let renew_at = Instant::now() + Duration::from_secs(limits::ONVIF_SUBSCRIPTION_S / 2);
    Ok(Subscription { address, skew_s, renew_at })
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
        wait_ms = (wait_ms * 2).min(limits::ONVIF_RESUBSCRIBE_MAX_MS);
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
        let who = Credentials { user: &cam.user, password: &cam.password, skew_s: sub.skew_s };
        if Instant::now() >= sub.renew_at {
            let body = events::renew_body(limits::ONVIF_SUBSCRIPTION_S);
            match call(&sub.address, MANAGER, "RenewRequest", Some(&who), now_s(), &body).await {
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
        let text = match call(&sub.address, PULL_POINT, "PullMessagesRequest", Some(&who), now_s(), &body).await {
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
    let who = Credentials { user: &cam.user, password: &cam.password, skew_s: sub.skew_s };
    let body = events::unsubscribe_body();
    if let Err(e) = call(&sub.address, MANAGER, "UnsubscribeRequest", Some(&who), now_s(), &body).await {
        debug!(camera = %cam.device, error = %e, "ONVIF events: Unsubscribe failed");
    }
}
