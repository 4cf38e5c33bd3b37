//! init's decisions, as pure functions of state and the time passed in, apart from the system
//! calls that carry them out (`supervise.rs`, `shutdown.rs`): when to start keeppeek, check
//! its health, kill it, and give up on a firmware on trial ([`Policy`]); how long to pause
//! before a restart ([`backoff_s`]); how long to wait for a DHCP lease and for keeppeek to
//! stop. No clock is read and no process is touched here: the tests below run minutes of
//! supervision in microseconds.
//!
//! Invariants: a firmware on trial is given up on after [`INIT_CRASHES_ON_TRIAL_MAX`] crashes
//! or past [`INIT_TRIAL_DEADLINE_S`], and never once marked good; a keeppeek out of its trial
//! is killed only after [`INIT_HEALTH_FAILURES_MAX`] failed checks in a row, none in its first
//! [`INIT_HEALTH_INTERVAL_S`]; restart pauses stay within [`INIT_RESTART_BACKOFF_MAX_S`].

use std::time::{Duration, Instant};

use crate::limits::{
    INIT_CRASHES_ON_TRIAL_MAX, INIT_HEALTH_FAILURES_MAX, INIT_HEALTH_INTERVAL_S, INIT_NETWORK_WAIT_S,
    INIT_RESTART_BACKOFF_MAX_S, INIT_STOP_GRACE_S, INIT_TRIAL_DEADLINE_S,
};

/// Restart pauses after a crash: 1 s, doubling, at most [`INIT_RESTART_BACKOFF_MAX_S`].
pub fn backoff_s(crashes_in_a_row: u32) -> u64 {
    1u64.checked_shl(crashes_in_a_row.saturating_sub(1).min(16)).unwrap_or(u64::MAX).min(INIT_RESTART_BACKOFF_MAX_S)
}

/// Whether init has waited for DHCP long enough: a lease, or [`INIT_NETWORK_WAIT_S`].
pub fn network_wait_over(waited: Duration, up: bool) -> bool {
    up || waited >= Duration::from_secs(INIT_NETWORK_WAIT_S)
}

/// Whether init has waited for keeppeek to stop long enough: it stopped, or
/// [`INIT_STOP_GRACE_S`] passed (it is then killed).
pub fn stop_wait_over(waited: Duration, running: bool) -> bool {
    !running || waited >= Duration::from_secs(INIT_STOP_GRACE_S)
}

/// What the supervisor does next, given the time and its child.
#[derive(Debug, PartialEq)]
pub enum Next {
    Wait,
    Start,
    CheckHealth,
    /// A firmware on trial failed it: restart into the previous slot.
    GiveUp(&'static str),
}

/// What a health check's result asks for.
#[derive(Debug, PartialEq)]
pub enum AfterCheck {
    Fine,
    /// The firmware on trial is healthy: mark it good.
    MarkGood,
    /// keeppeek stopped answering: kill it (it is started again).
    Kill,
}

/// The supervisor's decisions, apart from the system calls that carry them out.
///
/// Lifecycle: made at boot ([`Policy::new`]), asked [`Policy::next`] at every turn of the
/// loop, and told what happened: [`Policy::started`] after each start of keeppeek,
/// [`Policy::checked`] after each health check, [`Policy::exited`] when keeppeek ends.
pub struct Policy {
    on_trial: bool,
    boot: Instant,
    crashes: u32,
    restart_at: Option<Instant>,
    health_failures: u32,
    next_health: Instant,
}

impl Policy {
    /// At boot, `now`, with the firmware on trial or not; keeppeek is to start at once.
    pub fn new(on_trial: bool, now: Instant) -> Policy {
        Policy { on_trial, boot: now, crashes: 0, restart_at: Some(now), health_failures: 0, next_health: now }
    }

    /// Whether the firmware is still on trial (not yet marked good).
    pub fn on_trial(&self) -> bool {
        self.on_trial
    }

    /// keeppeek ended after running for `ran`: when to start it again.
    pub fn exited(&mut self, now: Instant, ran: Duration) -> Duration {
        if ran > Duration::from_secs(60) {
            self.crashes = 0;
        }
        self.crashes += 1;
        let pause = Duration::from_secs(backoff_s(self.crashes));
        self.restart_at = Some(now + pause);
        pause
    }

    /// keeppeek was started at `now`: its first check is a second later.
    pub fn started(&mut self, now: Instant) {
        self.restart_at = None;
        self.health_failures = 0;
        self.next_health = now + Duration::from_secs(1);
    }

    /// What to do at `now`, keeppeek `running` or not; answering `CheckHealth` books the next.
    pub fn next(&mut self, now: Instant, running: bool) -> Next {
        if self.on_trial && self.crashes >= INIT_CRASHES_ON_TRIAL_MAX {
            return Next::GiveUp("the new firmware keeps crashing");
        }
        if self.on_trial && now.duration_since(self.boot) > Duration::from_secs(INIT_TRIAL_DEADLINE_S) {
            return Next::GiveUp("the new firmware did not pass its health check in time");
        }
        if !running {
            return if self.restart_at.is_some_and(|t| now >= t) { Next::Start } else { Next::Wait };
        }
        if now < self.next_health {
            return Next::Wait;
        }
        // Every second while on trial (to be marked good soon), then every interval.
        let every = if self.on_trial { 1 } else { INIT_HEALTH_INTERVAL_S };
        self.next_health = now + Duration::from_secs(every);
        Next::CheckHealth
    }

    /// A health check answered `ok` or not, keeppeek having run for `running_for`.
    pub fn checked(&mut self, ok: bool, running_for: Duration) -> AfterCheck {
        if ok {
            self.health_failures = 0;
            if self.on_trial {
                self.on_trial = false;
                return AfterCheck::MarkGood;
            }
            return AfterCheck::Fine;
        }
        // A start takes a moment; a firmware on trial has its deadline instead.
        if self.on_trial || running_for < Duration::from_secs(INIT_HEALTH_INTERVAL_S) {
            return AfterCheck::Fine;
        }
        self.health_failures += 1;
        if self.health_failures >= INIT_HEALTH_FAILURES_MAX {
            self.health_failures = 0;
            return AfterCheck::Kill;
        }
        AfterCheck::Fine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_dhcp_and_for_keeppeek_to_stop_end_at_their_ceilings() {
        let s = Duration::from_secs;
        assert!(!network_wait_over(s(INIT_NETWORK_WAIT_S) - Duration::from_millis(1), false));
        assert!(network_wait_over(s(INIT_NETWORK_WAIT_S), false), "no lease: keeppeek starts anyway");
        assert!(network_wait_over(s(0), true));
        assert!(!stop_wait_over(s(INIT_STOP_GRACE_S) - Duration::from_millis(1), true));
        assert!(stop_wait_over(s(INIT_STOP_GRACE_S), true), "past its grace keeppeek is killed");
        assert!(stop_wait_over(s(0), false));
    }

    #[test]
    fn restart_pauses_grow_to_their_ceiling() {
        let pauses: Vec<u64> = (1..=8).map(backoff_s).collect();
        assert_eq!(&pauses[..5], &[1, 2, 4, 8, 16]);
        assert!(pauses.iter().all(|&p| p <= INIT_RESTART_BACKOFF_MAX_S));
        assert_eq!(backoff_s(1000), INIT_RESTART_BACKOFF_MAX_S);
    }

    #[test]
    fn a_firmware_on_trial_is_marked_good_once_healthy_and_given_up_on_crashes_or_the_deadline() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut p = Policy::new(true, t0);
        assert_eq!(p.next(t0, false), Next::Start);
        p.started(t0);
        assert_eq!(p.next(s(1), true), Next::CheckHealth);
        assert_eq!(p.checked(false, Duration::from_secs(1)), AfterCheck::Fine, "on trial a failure only waits");
        assert_eq!(p.next(s(2), true), Next::CheckHealth, "checked every second on trial");
        assert_eq!(p.checked(true, Duration::from_secs(2)), AfterCheck::MarkGood);
        assert!(!p.on_trial());
        assert_eq!(p.next(s(3), true), Next::CheckHealth, "the check booked while on trial");
        assert_eq!(p.checked(true, Duration::from_secs(3)), AfterCheck::Fine);
        assert_eq!(p.next(s(4), true), Next::Wait, "then every interval");
        assert_eq!(p.next(s(3 + INIT_HEALTH_INTERVAL_S), true), Next::CheckHealth);
        assert_eq!(p.checked(true, Duration::from_secs(20)), AfterCheck::Fine);
        assert_eq!(p.next(s(INIT_TRIAL_DEADLINE_S + 5), true), Next::CheckHealth, "a good firmware has no deadline");

        let mut p = Policy::new(true, t0);
        for n in 0..INIT_CRASHES_ON_TRIAL_MAX as u64 {
            assert_ne!(p.next(s(n * 40), false), Next::GiveUp(""), "crash {n}");
            p.started(s(n * 40));
            p.exited(s(n * 40 + 1), Duration::from_secs(1));
        }
        assert!(matches!(p.next(s(200), false), Next::GiveUp(w) if w.contains("crashing")));

        let mut p = Policy::new(true, t0);
        p.started(t0);
        assert_eq!(p.next(s(INIT_TRIAL_DEADLINE_S), true), Next::CheckHealth);
        assert!(matches!(p.next(s(INIT_TRIAL_DEADLINE_S + 1), true), Next::GiveUp(w) if w.contains("in time")));
    }

    #[test]
    fn a_hung_keeppeek_is_killed_after_its_failures_in_a_row_and_crashes_back_off() {
        let t0 = Instant::now();
        let mut p = Policy::new(false, t0);
        p.started(t0);
        let up = Duration::from_secs(INIT_HEALTH_INTERVAL_S);
        for _ in 1..INIT_HEALTH_FAILURES_MAX {
            assert_eq!(p.checked(false, up), AfterCheck::Fine);
        }
        assert_eq!(p.checked(true, up), AfterCheck::Fine, "one answer starts the count over");
        for _ in 1..INIT_HEALTH_FAILURES_MAX {
            assert_eq!(p.checked(false, up), AfterCheck::Fine);
        }
        assert_eq!(p.checked(false, up), AfterCheck::Kill);
        assert_eq!(p.checked(false, Duration::from_secs(1)), AfterCheck::Fine, "just started: not counted");
        // Crashes in a row back off; a long run starts the count over.
        let pauses: Vec<u64> = (0..3).map(|_| p.exited(t0, Duration::from_secs(1)).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4]);
        assert_eq!(p.exited(t0, Duration::from_secs(600)).as_secs(), 1);
        assert_eq!(p.next(t0, false), Next::Wait);
        assert_eq!(p.next(t0 + Duration::from_secs(1), false), Next::Start);
    }
}
