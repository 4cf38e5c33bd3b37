//! `GET /api/health?offset&limit`: the recording health list, one row per configured
//! stream: its state now, the share of the last 24 hours, 7 days and 30 days recorded, the
//! gaps of the last day, the bytes stored and the oldest footage kept; and the disk's size,
//! free space and reserve. Paged (at most
//! [`limits::HEALTH_PAGE_ROWS_MAX`] rows): a box with 127 cameras answers a page as fast as
//! one with 2, and only the page's streams touch the catalog (on the blocking pool).

use http::StatusCode;
use http::request::Parts;
use serde_json::json;

use super::Ctx;
use super::errors::fail;
use super::reply::{self, Reply, error, on_pool};
use crate::base::StreamKey;
use crate::catalog::Catalog;
use crate::limits;

const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 24 * HOUR_US;
/// The windows a row reports, by name.
const WINDOWS: [(&str, i64); 3] = [("day", DAY_US), ("week", 7 * DAY_US), ("month", 30 * DAY_US)];

/// The page asked for: `offset` (default 0) and `limit` (default 25, at most the ceiling).
/// `offset` and `limit` of a paged list (`limit` 25 unless asked, at most `max`).
pub(super) fn page(query: &str, max: usize) -> Result<(usize, usize), String> {
    let (mut offset, mut limit) = (0, 25.min(max));
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let n = || v.parse::<usize>().map_err(|_| format!("{k} is a count"));
        match k.as_ref() {
            "offset" => offset = n()?,
            "limit" => limit = n()?.clamp(1, max),
            _ => {}
        }
    }
    Ok((offset, limit))
}

/// What the catalog tells of one stream.
struct Stored {
    /// Recorded µs in each of [`WINDOWS`].
    recorded_us: [u64; 3],
    gaps_day: usize,
    bytes: u64,
    oldest_us: Option<i64>,
}

fn stored(catalog: &Catalog, key: &StreamKey, now_us: i64) -> Result<Option<Stored>, crate::catalog::CatalogError> {
    let Some(id) = catalog.find_stream(key)? else { return Ok(None) };
    let mut recorded_us = [0u64; 3];
    for (hour, b) in catalog.coverage(id, now_us - WINDOWS[2].1, now_us)? {
        for (i, (_, window)) in WINDOWS.iter().enumerate() {
            if hour + HOUR_US > now_us - window {
                recorded_us[i] += b.recorded_us;
            }
        }
    }
    let totals = catalog.stream_totals(id)?;
    // The oldest footage: the first run in the first hour that holds any.
    let oldest_us = match totals.first_hour_us {
        Some(h) => catalog.runs(id, h, h + HOUR_US, 1)?.runs.first().map(|r| r.start_us).or(Some(h)),
        None => None,
    };
    let day = catalog.runs(id, now_us - DAY_US, now_us, limits::API_LIST_MAX)?;
    Ok(Some(Stored { recorded_us, gaps_day: day.runs.len().saturating_sub(1), bytes: totals.bytes, oldest_us }))
}

pub(super) async fn page_of_streams(ctx: &Ctx, parts: &Parts) -> Reply {
    let (offset, limit) = match page(parts.uri.query().unwrap_or(""), limits::HEALTH_PAGE_ROWS_MAX) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_page", &e),
    };
    let mut streams = ctx.services.cameras.streams();
    streams.sort_by(|a, b| (&a.key.camera, a.key.kind.name()).cmp(&(&b.key.camera, b.key.kind.name())));
    let total = streams.len();
    let streams: Vec<_> = streams.into_iter().skip(offset).take(limit).collect();
    let now_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
    let catalog = ctx.services.catalog.clone();
    let keys: Vec<StreamKey> = streams.iter().map(|s| s.key.clone()).collect();
    let found = on_pool(move || {
        keys.iter().map(|k| stored(&catalog, k, now_us)).collect::<Result<Vec<_>, _>>().map_err(|e| fail(&e))
    });
    let found = match found.await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let rows: Vec<_> = streams
        .iter()
        .zip(found)
        .map(|(s, kept)| {
            let st = s.state.snapshot();
            let mut row = json!({
                "camera": &*s.key.camera,
                "stream": s.key.kind.name(),
                "connected": st.connected,
                "record_mode": s.recording.as_ref().map_or("off", |r| r.mode.name()),
                "last_error": st.last_error,
                "recorded": kept.is_some(),
            });
            if let (Some(k), Some(o)) = (kept, row.as_object_mut()) {
                let share = |i: usize| (k.recorded_us[i] as f64 / WINDOWS[i].1 as f64).min(1.0);
                o.insert("coverage".into(), json!({ "day": share(0), "week": share(1), "month": share(2) }));
                o.insert("gaps_day".into(), json!(k.gaps_day));
                o.insert("bytes".into(), json!(k.bytes));
                o.insert("oldest_us".into(), json!(k.oldest_us));
            }
            row
        })
        .collect();
    // The filesystem the recordings are on: its size, what is free, and the reserve the
    // disk-full rule keeps.
    let held_bytes = ctx.services.flusher.held_bytes.load(std::sync::atomic::Ordering::Relaxed);
    let disk = crate::base::fs::disk_space(&ctx.services.data_dir).map(|d| {
        json!({
            "total_bytes": d.total_bytes, "free_bytes": d.free_bytes, "reserve_bytes": d.reserve_bytes,
            "held_bytes": held_bytes,
        })
    });
    reply::json(
        StatusCode::OK,
        json!({ "total": total, "offset": offset, "now_us": now_us, "rows": rows, "disk": disk }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_at_most_the_ceiling_and_a_bad_count_is_refused() {
        let page = |q: &str| page(q, limits::HEALTH_PAGE_ROWS_MAX);
        assert_eq!(page(""), Ok((0, 25)));
        assert_eq!(page("offset=50&limit=25"), Ok((50, 25)));
        assert_eq!(page("limit=100000"), Ok((0, limits::HEALTH_PAGE_ROWS_MAX)));
        assert_eq!(page("limit=0"), Ok((0, 1)));
        assert!(page("offset=-1").is_err());
        assert!(page("limit=x").is_err());
    }
}
