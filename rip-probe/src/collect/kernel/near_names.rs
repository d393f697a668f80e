//! The function names closest to a pattern that matched none, so the
//! "no match" error can say what the user may have meant.

/// The longest pattern (its literal text, in characters) suggestions are
/// looked for.
const MAX_NEAR: usize = 256;

/// Up to `n` of `names` closest to `pattern`: those containing the
/// pattern's literal text first, then by edit distance to it.
pub(crate) fn nearest<'a>(pattern: &str, names: &[&'a str], n: usize) -> Vec<&'a str> {
    // The glob's literal text: what the user typed of the name.
    let core: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?' | '[' | ']' | '!'))
        .collect::<String>()
        .to_lowercase();
    // No function name is near a text this long, and comparing with it
    // would cost its length times every name's (seconds for a pasted
    // page): no suggestion.
    if core.chars().count() > MAX_NEAR {
        return Vec::new();
    }
    let mut scored: Vec<(bool, usize, &str)> = names
        .iter()
        .map(|&name| {
            let lower = name.to_lowercase();
            (!lower.contains(&core), distance(&core, &lower), name)
        })
        .collect();
    scored.sort();
    scored.dedup_by_key(|s| s.2);
    scored.into_iter().take(n).map(|s| s.2).collect()
}

/// Levenshtein distance, in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_first() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        let names = [
            "work_fast",
            "work_slow",
            "main",
            "worker_wait",
            "frobnicate",
        ];
        assert_eq!(nearest("wrok_fast", &names, 2), ["work_fast", "work_slow"]);
        assert_eq!(nearest("*slow*", &names, 1), ["work_slow"]);
        assert_eq!(nearest("x", &names, 10).len(), 5);
        assert!(nearest(&"w".repeat(10_000), &names, 5).is_empty());
    }
}
