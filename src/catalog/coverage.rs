//! Coverage summaries: how much of each hour a stream has recorded, kept in the catalog as
//! fragments come and go, so the coverage dashboard and the timeline read a few rows per
//! day instead of scanning fragment rows. Pure arithmetic here; the catalog applies it in the
//! same transaction as the fragment rows, so the summaries can never disagree with them.

use super::FragmentRow;

/// The summary's time bucket: one hour of wall time (UTC), aligned to the hour. Coarser
/// views (6-hour buckets, days) add hours up.
pub const BUCKET_US: i64 = 3_600_000_000;

/// One bucket's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Wall time covered by fragments, µs.
    pub recorded_us: u64,
    /// Bytes of the fragments that start in this bucket.
    pub bytes: u64,
    /// Fragments that start in this bucket.
    pub fragments: u64,
}

impl Bucket {
    pub fn to_tuple(self) -> (u64, u64, u64) {
        (self.recorded_us, self.bytes, self.fragments)
    }

    pub fn from_tuple((recorded_us, bytes, fragments): (u64, u64, u64)) -> Self {
        Bucket { recorded_us, bytes, fragments }
    }
}

/// The start of the bucket holding `wall_us`.
pub fn bucket_of(wall_us: i64) -> i64 {
    wall_us.div_euclid(BUCKET_US).saturating_mul(BUCKET_US)
}

/// What one fragment adds to each bucket it touches: (bucket start, contribution).
pub fn contributions(f: &FragmentRow) -> Vec<(i64, Bucket)> {
    let mut out = Vec::with_capacity(2);
    let end = f.wall_end_us.max(f.wall_start_us);
    let mut at = f.wall_start_us;
    let first = bucket_of(f.wall_start_us);
    loop {
        let bucket = bucket_of(at);
        let until = (bucket + BUCKET_US).min(end);
        let mut b = Bucket { recorded_us: (until - at) as u64, ..Bucket::default() };
        if bucket == first {
            b.bytes = f.end_byte - f.start_byte;
            b.fragments = 1;
        }
        out.push((bucket, b));
        if until >= end {
            break;
        }
        at = until;
    }
    out
}

/// Adds (`sign` > 0) or removes a contribution.
pub fn apply(total: Bucket, c: Bucket, add: bool) -> Bucket {
    if add {
        Bucket {
            recorded_us: total.recorded_us + c.recorded_us,
            bytes: total.bytes + c.bytes,
            fragments: total.fragments + c.fragments,
        }
    } else {
        Bucket {
            recorded_us: total.recorded_us.saturating_sub(c.recorded_us),
            bytes: total.bytes.saturating_sub(c.bytes),
            fragments: total.fragments.saturating_sub(c.fragments),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(start_us: i64, end_us: i64) -> FragmentRow {
        FragmentRow {
            wall_start_us: start_us,
            wall_end_us: end_us,
            media_start_90k: 0,
            duration_90k: 0,
            start_byte: 100,
            end_byte: 600,
            frames: 1,
            keyframes: 1,
        }
    }

    #[test]
    fn a_fragment_across_the_hour_is_split_and_counted_once() {
        let h = 10 * BUCKET_US;
        let c = contributions(&fragment(h - 1_000_000, h + 3_000_000));
        assert_eq!(
            c,
            vec![
                (9 * BUCKET_US, Bucket { recorded_us: 1_000_000, bytes: 500, fragments: 1 }),
                (h, Bucket { recorded_us: 3_000_000, bytes: 0, fragments: 0 }),
            ]
        );
        let inside = contributions(&fragment(h + 5, h + 10));
        assert_eq!(inside, vec![(h, Bucket { recorded_us: 5, bytes: 500, fragments: 1 })]);
    }

    #[test]
    fn removing_what_was_added_gives_back_the_total() {
        let c = Bucket { recorded_us: 7, bytes: 8, fragments: 1 };
        let t = apply(Bucket::default(), c, true);
        assert_eq!(apply(t, c, false), Bucket::default());
        assert_eq!(apply(Bucket::default(), c, false), Bucket::default(), "never below zero");
        assert_eq!(bucket_of(-1), -BUCKET_US);
    }
}
