//! The route table: a request's method and path, parsed once into a [`Route`] that says who
//! may call it ([`Route::access`]). The auth check is written once, in [`super::api`].

use http::Method;

use crate::auth::scope;
use crate::base::{StreamKey, StreamKind};

/// A stream as a path names it: `{camera}/{kind}` (a kind other than `main` or `sub` is no
/// route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamPath<'a> {
    pub camera: &'a str,
    pub kind: StreamKind,
}

impl StreamPath<'_> {
    /// The stream's key, as the catalog, the recorder and live view know it.
    pub fn key(&self) -> StreamKey {
        StreamKey::new(self.camera, self.kind)
    }
}

/// Every route, with what its path carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `GET` of a path outside `/api/`: one of the UI's files (the login page).
    UiFile(&'a str),
    SetupStatus,
    Setup,
    Login,
    /// Single sign-on: the providers, a sign-in started with one, and its return.
    SsoProviders,
    SsoStart(&'a str),
    SsoCallback,
    Metrics,
    Cameras,
    Recordings(StreamPath<'a>),
    Coverage(StreamPath<'a>),
    Poster(StreamPath<'a>),
    Health,
    ConfigSnapshot,
    ConfigPlan,
    ConfigApply,
    ConfigRevisions,
    CameraProbe,
    CameraDiscover,
    CameraOnvif,
    Export(StreamPath<'a>),
    Playlist(StreamPath<'a>),
    /// `…/exports/{from_us}-{to_us}.mp4`, the form HLS segments use.
    ExportNamed(StreamPath<'a>, &'a str),
    DeleteRecordings(StreamPath<'a>),
    WhepOpen(StreamPath<'a>),
    WhepClose(&'a str),
    EventIntake,
    EventSearch,
    EventRevisions(&'a str),
    EventKeyframe(&'a str),
    EventSnapshot(&'a str),
    EventDelete(&'a str),
    System,
    SystemUpdate,
    SystemReboot,
    SystemFactoryReset,
    SupportBundle,
    /// The HTTPS certificate served (`GET`), an admin's own (`POST`), the box's own again
    /// (`DELETE`).
    Https,
    HttpsUpload,
    HttpsReset,
    /// The MQTT connection's state.
    Mqtt,
    /// The cameras' own event subscriptions (ONVIF) and how they go.
    CameraEvents,
    /// The offsite archive's targets and their backlogs.
    Archive,
    CameraPort,
    /// The boxes and streams each archive target's bucket holds.
    ArchiveList,
    /// An archived stream's recordings over a range, from a target's bucket.
    ArchiveRecordings(&'a str),
    /// An archived range as one MP4, read from a target's bucket.
    ArchiveExport(&'a str),
    /// A camera's archived events over a range, from a target's bucket.
    ArchiveEvents(&'a str),
    /// An archived event's snapshot, from a target's bucket.
    ArchiveSnapshot(&'a str),
    Me,
    Logout,
    Users,
    UserPut,
    UserDelete(&'a str),
    Tokens,
    TokenCreate,
    TokenDelete(&'a str),
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No credential needed.
    Anyone,
    /// Any session or token.
    Signed,
    /// A credential with this scope (an admin has every scope).
    Scope(u8),
}

impl<'a> Route<'a> {
    /// The route of `method` (`HEAD` counts as `GET`) and `path`; none when there is none.
    pub fn parse(method: &Method, path: &'a str) -> Option<Route<'a>> {
        use Route::*;
        let get = *method == Method::GET || *method == Method::HEAD;
        let segments: heapless::Vec<&str, 8> = {
            let mut v = heapless::Vec::new();
            for s in path.trim_start_matches('/').split('/') {
                v.push(s).ok()?;
            }
            v
        };
        let m = if get { &Method::GET } else { method };
        let stream = |camera, kind| Some(StreamPath { camera, kind: StreamKind::parse(kind)? });
        Some(match (m, segments.as_slice()) {
            (&Method::GET, ["metrics"]) => Metrics,
            (&Method::GET, ["api", "setup"]) => SetupStatus,
            (&Method::POST, ["api", "setup"]) => Setup,
            (&Method::POST, ["api", "login"]) => Login,
            (&Method::GET, ["api", "oidc", "providers"]) => SsoProviders,
            (&Method::GET, ["api", "oidc", "callback"]) => SsoCallback,
            (&Method::GET, ["api", "oidc", id, "login"]) => SsoStart(id),
            (&Method::GET, ["api", "cameras"]) => Cameras,
            (&Method::GET, ["api", "streams", c, k, "recordings"]) => Recordings(stream(c, k)?),
            (&Method::GET, ["api", "streams", c, k, "coverage"]) => Coverage(stream(c, k)?),
            (&Method::GET, ["api", "streams", c, k, "poster.mp4"]) => Poster(stream(c, k)?),
            (&Method::GET, ["api", "health"]) => Health,
            (&Method::GET, ["api", "config"]) => ConfigSnapshot,
            (&Method::POST, ["api", "config", "plan"]) => ConfigPlan,
            (&Method::POST, ["api", "config", "apply"]) => ConfigApply,
            (&Method::GET, ["api", "config", "revisions"]) => ConfigRevisions,
            (&Method::POST, ["api", "cameras", "probe"]) => CameraProbe,
            (&Method::POST, ["api", "cameras", "discover"]) => CameraDiscover,
            (&Method::POST, ["api", "cameras", "onvif"]) => CameraOnvif,
            (&Method::GET, ["api", "streams", c, k, "export.mp4"]) => Export(stream(c, k)?),
            (&Method::GET, ["api", "streams", c, k, "export.m3u8"]) => Playlist(stream(c, k)?),
            (&Method::GET, ["api", "streams", c, k, "exports", name]) => ExportNamed(stream(c, k)?, name),
            (&Method::DELETE, ["api", "streams", c, k, "recordings"]) => DeleteRecordings(stream(c, k)?),
            (&Method::DELETE, ["api", "whep", "sessions", id]) => WhepClose(id),
            (&Method::POST, ["api", "whep", c, k]) => WhepOpen(stream(c, k)?),
            (&Method::POST, ["api", "events"]) => EventIntake,
            (&Method::GET, ["api", "events"]) => EventSearch,
            (&Method::GET, ["api", "events", id]) => EventRevisions(id),
            (&Method::GET, ["api", "events", id, "keyframe"]) => EventKeyframe(id),
            (&Method::GET, ["api", "events", id, "snapshot"]) => EventSnapshot(id),
            (&Method::DELETE, ["api", "events", id]) => EventDelete(id),
            (&Method::GET, ["api", "system"]) => System,
            (&Method::POST, ["api", "system", "update"]) => SystemUpdate,
            (&Method::POST, ["api", "system", "reboot"]) => SystemReboot,
            (&Method::POST, ["api", "system", "factory-reset"]) => SystemFactoryReset,
            (&Method::GET, ["api", "system", "support-bundle"]) => SupportBundle,
            (&Method::GET, ["api", "system", "https"]) => Https,
            (&Method::POST, ["api", "system", "https"]) => HttpsUpload,
            (&Method::DELETE, ["api", "system", "https"]) => HttpsReset,
            (&Method::GET, ["api", "system", "mqtt"]) => Mqtt,
            (&Method::GET, ["api", "system", "camera-events"]) => CameraEvents,
            (&Method::GET, ["api", "system", "archive"]) => Archive,
            (&Method::GET, ["api", "system", "camera-port"]) => CameraPort,
            (&Method::GET, ["api", "archive"]) => ArchiveList,
            (&Method::GET, ["api", "archive", target, "recordings"]) => ArchiveRecordings(target),
            (&Method::GET, ["api", "archive", target, "export.mp4"]) => ArchiveExport(target),
            (&Method::GET, ["api", "archive", target, "events"]) => ArchiveEvents(target),
            (&Method::GET, ["api", "archive", target, "snapshot.jpg"]) => ArchiveSnapshot(target),
            (&Method::GET, ["api", "me"]) => Me,
            (&Method::POST, ["api", "logout"]) => Logout,
            (&Method::GET, ["api", "users"]) => Users,
            (&Method::POST, ["api", "users"]) => UserPut,
            (&Method::DELETE, ["api", "users", name]) => UserDelete(name),
            (&Method::GET, ["api", "tokens"]) => Tokens,
            (&Method::POST, ["api", "tokens"]) => TokenCreate,
            (&Method::DELETE, ["api", "tokens", id]) => TokenDelete(id),
            (&Method::GET, _) if !path.starts_with("/api/") => UiFile(path),
            _ => return None,
        })
    }

    /// Who may call it.
    pub fn access(&self) -> Access {
        use Route::*;
        match self {
            UiFile(_) | SetupStatus | Setup | Login | SsoProviders | SsoStart(_) | SsoCallback => Access::Anyone,
            Me | Logout => Access::Signed,
            Metrics => Access::Scope(scope::METRICS),
            Cameras | Recordings(_) | Coverage(_) | Poster(_) | Health | Export(_) | Playlist(_) | ExportNamed(..) => {
                Access::Scope(scope::VIEW)
            }
            WhepOpen(_) | WhepClose(_) => Access::Scope(scope::VIEW),
            ArchiveList | ArchiveRecordings(_) | ArchiveExport(_) | ArchiveEvents(_) | ArchiveSnapshot(_) => {
                Access::Scope(scope::VIEW)
            }
            EventSearch | EventRevisions(_) | EventKeyframe(_) | EventSnapshot(_) | System | Https => {
                Access::Scope(scope::VIEW)
            }
            EventIntake => Access::Scope(scope::EVENTS_WRITE),
            DeleteRecordings(_) | EventDelete(_) | SystemUpdate | SystemReboot | SystemFactoryReset | SupportBundle => {
                Access::Scope(scope::ADMIN)
            }
            HttpsUpload | HttpsReset | Mqtt | CameraEvents | Archive | CameraPort => Access::Scope(scope::ADMIN),
            Users | UserPut | UserDelete(_) | Tokens | TokenCreate | TokenDelete(_) => Access::Scope(scope::ADMIN),
            ConfigSnapshot | ConfigPlan | ConfigApply | ConfigRevisions | CameraProbe | CameraDiscover
            | CameraOnvif => Access::Scope(scope::ADMIN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route, the scope it needs, and a path that reaches it: the table the UI and
    /// `docs/security.md` describe.
    #[test]
    fn every_route_needs_its_scope() {
        use Access::*;
        let (view, admin) = (Scope(scope::VIEW), Scope(scope::ADMIN));
        let table: &[(&str, &str, Access)] = &[
            ("GET", "/", Anyone),
            ("GET", "/app.js", Anyone),
            ("GET", "/api/setup", Anyone),
            ("POST", "/api/setup", Anyone),
            ("POST", "/api/login", Anyone),
            ("GET", "/api/oidc/providers", Anyone),
            ("GET", "/api/oidc/home/login", Anyone),
            ("GET", "/api/oidc/callback", Anyone),
            ("GET", "/metrics", Scope(scope::METRICS)),
            ("GET", "/api/cameras", view),
            ("GET", "/api/streams/a/main/recordings", view),
            ("HEAD", "/api/streams/a/main/coverage", view),
            ("GET", "/api/streams/a/main/export.mp4", view),
            ("GET", "/api/streams/a/main/export.m3u8", view),
            ("GET", "/api/streams/a/main/exports/1-2.mp4", view),
            ("DELETE", "/api/streams/a/main/recordings", admin),
            ("POST", "/api/whep/a/main", view),
            ("DELETE", "/api/whep/sessions/7", view),
            ("POST", "/api/events", Scope(scope::EVENTS_WRITE)),
            ("GET", "/api/events", view),
            ("GET", "/api/events/7", view),
            ("GET", "/api/events/7/keyframe", view),
            ("GET", "/api/events/7/snapshot", view),
            ("DELETE", "/api/events/7", admin),
            ("GET", "/api/system", view),
            ("POST", "/api/system/update", admin),
            ("POST", "/api/system/reboot", admin),
            ("POST", "/api/system/factory-reset", admin),
            ("GET", "/api/system/support-bundle", admin),
            ("GET", "/api/system/https", view),
            ("POST", "/api/system/https", admin),
            ("DELETE", "/api/system/https", admin),
            ("GET", "/api/system/mqtt", admin),
            ("GET", "/api/system/camera-events", admin),
            ("GET", "/api/system/archive", admin),
            ("GET", "/api/system/camera-port", admin),
            ("GET", "/api/me", Signed),
            ("POST", "/api/logout", Signed),
            ("GET", "/api/users", admin),
            ("POST", "/api/users", admin),
            ("DELETE", "/api/users/bob", admin),
            ("GET", "/api/tokens", admin),
            ("POST", "/api/tokens", admin),
            ("DELETE", "/api/tokens/3", admin),
            ("GET", "/api/config", admin),
            ("POST", "/api/config/plan", admin),
            ("POST", "/api/config/apply", admin),
            ("GET", "/api/config/revisions", admin),
            ("POST", "/api/cameras/probe", admin),
            ("POST", "/api/cameras/discover", admin),
            ("POST", "/api/cameras/onvif", admin),
        ];
        for (method, path, access) in table {
            let route = Route::parse(&method.parse().unwrap(), path).unwrap_or_else(|| panic!("{method} {path}"));
            assert_eq!(route.access(), *access, "{method} {path}");
        }
        // The route carries what its path names.
        let export = Route::parse(&Method::GET, "/api/streams/door/sub/exports/1-2.mp4").unwrap();
        assert_eq!(export, Route::ExportNamed(StreamPath { camera: "door", kind: StreamKind::Sub }, "1-2.mp4"));
        // Nothing else is a route.
        for (method, path) in [
            ("GET", "/api/nothing"),
            ("POST", "/"),
            ("PUT", "/api/users"),
            ("GET", "/api/streams/a/main/other"),
            ("GET", "/api/streams/a/third/recordings"),
            ("DELETE", "/api/whep/a/main"),
            ("GET", "/a/b/c/d/e/f/g/h/i"),
        ] {
            assert_eq!(Route::parse(&method.parse().unwrap(), path), None, "{method} {path}");
        }
    }
}
