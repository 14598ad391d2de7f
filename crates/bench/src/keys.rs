//! Key choice and request mix, deterministic for a given seed.
//!
//! memtier_benchmark's letters: `P` parallel (each client walks its own slice of the key
//! range), `S` sequential (each client walks the whole range), `R` uniform random, `G`
//! gaussian around the middle of the range (standard deviation: a sixth of the range).

/// xorshift64*: small, fast, and reproducible from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// One of memtier's key patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Parallel,
    Sequential,
    Random,
    Gaussian,
}

impl Pattern {
    pub fn parse(letter: &str) -> Option<Pattern> {
        match letter {
            "P" => Some(Pattern::Parallel),
            "S" => Some(Pattern::Sequential),
            "R" => Some(Pattern::Random),
            "G" => Some(Pattern::Gaussian),
            _ => None,
        }
    }
}

/// Parses `SET:GET` patterns such as `R:R` or `P:P`.
pub fn parse_patterns(s: &str) -> Result<(Pattern, Pattern), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("key pattern {s:?}: expected SET:GET, e.g. R:R"))?;
    let p = |x: &str| {
        Pattern::parse(x).ok_or_else(|| format!("key pattern letter {x:?}: use P, S, R or G"))
    };
    Ok((p(a)?, p(b)?))
}

/// Parses a `SET:GET` ratio such as `1:10`.
pub fn parse_ratio(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("ratio {s:?}: expected SET:GET, e.g. 1:10"))?;
    let n = |x: &str| {
        x.parse::<u32>()
            .map_err(|_| format!("ratio {s:?}: not a number"))
    };
    let r = (n(a)?, n(b)?);
    if r.0 + r.1 == 0 {
        return Err("ratio 0:0 sends nothing".into());
    }
    Ok(r)
}

/// Generates the keys one client uses for one kind of request.
#[derive(Clone, Debug)]
pub struct KeyGen {
    pattern: Pattern,
    min: u64,
    max: u64,
    /// Next key for P and S.
    cursor: u64,
    /// P: this client's slice [lo, hi].
    lo: u64,
    hi: u64,
}

impl KeyGen {
    /// `client` is this client's index among `clients` in the whole run.
    pub fn new(pattern: Pattern, min: u64, max: u64, client: u64, clients: u64) -> KeyGen {
        let span = max - min + 1;
        let (lo, hi) = if pattern == Pattern::Parallel {
            let per = span / clients;
            let lo = min + client * per;
            let hi = if client + 1 == clients {
                max
            } else {
                lo + per - 1
            };
            (lo, hi.max(lo))
        } else {
            (min, max)
        };
        KeyGen {
            pattern,
            min,
            max,
            cursor: lo,
            lo,
            hi,
        }
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let span = self.max - self.min + 1;
        match self.pattern {
            Pattern::Parallel | Pattern::Sequential => {
                let k = self.cursor;
                self.cursor = if self.cursor >= self.hi {
                    self.lo
                } else {
                    self.cursor + 1
                };
                k
            }
            Pattern::Random => self.min + rng.next_u64() % span,
            Pattern::Gaussian => {
                let mid = (self.min + self.max) as f64 / 2.0;
                let k = (mid + rng.normal() * span as f64 / 6.0).round();
                (k.max(self.min as f64).min(self.max as f64)) as u64
            }
        }
    }
}

/// The request mix: `sets` sets then `gets` gets, repeated.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    sets: u32,
    gets: u32,
    at: u32,
}

impl Mix {
    pub fn new((sets, gets): (u32, u32)) -> Mix {
        Mix { sets, gets, at: 0 }
    }

    /// Whether the next request is a set.
    pub fn next_is_set(&mut self) -> bool {
        let is_set = self.at < self.sets;
        self.at = (self.at + 1) % (self.sets + self.gets);
        is_set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_slices_cover_the_range_once() {
        let mut seen = Vec::new();
        let mut rng = Rng::new(1);
        for c in 0..3 {
            let mut g = KeyGen::new(Pattern::Parallel, 1, 10, c, 3);
            let n = if c == 2 { 4 } else { 3 };
            for _ in 0..n {
                seen.push(g.next(&mut rng));
            }
        }
        seen.sort();
        assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    }

    #[test]
    fn random_and_gaussian_stay_in_range_and_repeat_by_seed() {
        for p in [Pattern::Random, Pattern::Gaussian] {
            let mut a = KeyGen::new(p, 5, 50, 0, 1);
            let mut b = a.clone();
            let (mut ra, mut rb) = (Rng::new(7), Rng::new(7));
            for _ in 0..10_000 {
                let (x, y) = (a.next(&mut ra), b.next(&mut rb));
                assert_eq!(x, y);
                assert!((5..=50).contains(&x));
            }
        }
        let mut g = KeyGen::new(Pattern::Gaussian, 1, 1000, 0, 1);
        let mut rng = Rng::new(3);
        let middle = (0..10_000)
            .filter(|_| (334..=667).contains(&g.next(&mut rng)))
            .count();
        assert!(
            middle > 6_000,
            "gaussian keys cluster in the middle: {middle}"
        );
    }

    #[test]
    fn ratio_schedule() {
        let mut m = Mix::new((1, 3));
        let got: Vec<bool> = (0..8).map(|_| m.next_is_set()).collect();
        assert_eq!(got, [true, false, false, false, true, false, false, false]);
        assert_eq!(parse_ratio("3:7"), Ok((3, 7)));
        assert!(parse_ratio("0:0").is_err());
        assert_eq!(
            parse_patterns("P:R"),
            Ok((Pattern::Parallel, Pattern::Random))
        );
        assert!(parse_patterns("X:R").is_err());
    }
}
