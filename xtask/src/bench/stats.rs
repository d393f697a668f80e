//! Medians, run lengths and the order of interleaved runs; counts as the
//! tables print them.

/// The median of `xs` (the mean of the middle two for an even count);
/// `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// An interval that holds the median of the distribution `xs` were drawn
/// from with a probability of about 95 %, whatever that distribution is:
/// the order statistics whose ranks lie 1.96 standard deviations of
/// Binomial(n, 1/2) either side of n/2. `None` for fewer than 6 values
/// (no such interval inside them).
pub fn median_interval(xs: &[f64]) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n < 6 {
        return None;
    }
    let half_width = 1.96 * (n as f64).sqrt() / 2.0;
    let lo = ((n as f64 / 2.0 - half_width).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half_width).ceil() as usize).min(n - 1);
    Some((v[lo], v[hi]))
}

/// The smallest and largest of `xs`.
pub fn range(xs: &[f64]) -> Option<(f64, f64)> {
    let min = xs.iter().copied().min_by(f64::total_cmp)?;
    let max = xs.iter().copied().max_by(f64::total_cmp)?;
    Some((min, max))
}

/// How many calls make a run of about `target_ns` at `per_call_ns` each,
/// within `min..=max`, rounded to two significant digits.
pub fn calls_for(per_call_ns: f64, target_ns: f64, min: u64, max: u64) -> u64 {
    let raw = if per_call_ns > 0.0 {
        target_ns / per_call_ns
    } else {
        max as f64
    };
    let raw = raw.clamp(min as f64, max as f64);
    let scale = 10f64.powi((raw.log10().floor() as i32 - 1).max(0));
    let rounded = ((raw / scale).round() * scale) as u64;
    rounded.clamp(min, max)
}

/// The row order of one round: `0..n` shuffled.
pub fn round_order(n: usize, rng: &mut fastrand::Rng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    order
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 100.0, 2.0, 3.0, 1e9]), Some(3.0));
        assert_eq!(range(&[2.0, 9.0, 1.0]), Some((1.0, 9.0)));
        assert_eq!(median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0]), None);
        // 35 values 0..34: ranks 12 and 25 (0-based 11 and 24).
        let v: Vec<f64> = (0..35).rev().map(f64::from).collect();
        assert_eq!(median_interval(&v), Some((11.0, 24.0)));
        // Six values: the whole range.
        assert_eq!(
            median_interval(&[6.0, 1.0, 5.0, 2.0, 4.0, 3.0]),
            Some((1.0, 6.0))
        );
        assert_eq!(range(&[]), None);
    }

    #[test]
    fn run_lengths() {
        // 0.5 s of 2.5 ns calls.
        assert_eq!(calls_for(2.5, 5e8, 1_000_000, 1_000_000_000), 200_000_000);
        // Two significant digits.
        assert_eq!(calls_for(23_456.0, 5e8, 1_000, 1_000_000), 21_000);
        // Clamped both ways.
        assert_eq!(calls_for(1e6, 5e8, 2_000, 10_000), 2_000);
        assert_eq!(calls_for(0.01, 5e8, 1, 1_000_000), 1_000_000);
        assert_eq!(calls_for(0.0, 5e8, 1, 777), 777);
        assert_eq!(calls_for(1e9, 5e8, 1, 10), 1);
    }

    #[test]
    fn every_round_runs_every_row_once() {
        let mut rng = fastrand::Rng::with_seed(7);
        let orders: Vec<Vec<usize>> = (0..20).map(|_| round_order(6, &mut rng)).collect();
        for o in &orders {
            let mut s = o.clone();
            s.sort();
            assert_eq!(s, (0..6).collect::<Vec<_>>());
        }
        assert!(orders.iter().any(|o| o != &orders[0]), "never shuffled");
    }
}
