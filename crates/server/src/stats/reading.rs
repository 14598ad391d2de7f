//! A figure as both renderings see it: [`Reading`], a name (memcached's or ARCUS's), its
//! Prometheus name, a kind, a one-line description and a value; [`Readings`] builds a list of
//! them in `stats` order.
//!
//! ```text
//!   a layer's stats struct ──stats::general / persistence / grpc / flash──> Vec<Reading>
//!        ├─> cmd/stats.rs:  STAT name value                (value)
//!        └─> metrics.rs:    cairn_metric[_total] number    (export, in the metric's unit)
//! ```
//!
//! Non-goals: reading any figure (the modules beside this one), writing either format.

/// Whether a figure only grows (until `stats reset` or a restart) or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A figure's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    /// Shown by `stats`, not exported.
    Text(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:.6}"),
            Value::Text(v) => f.write_str(v),
        }
    }
}

/// One figure as read now.
#[derive(Clone, Debug)]
pub struct Reading {
    /// The `stats` name (memcached's or ARCUS's where they have one).
    pub name: &'static str,
    /// The Prometheus name, without the `cairn_` prefix and the counters' `_total`.
    pub metric: &'static str,
    pub kind: Kind,
    /// One line for `# HELP`.
    pub help: &'static str,
    /// What `stats` shows.
    pub value: Value,
    /// What the endpoint shows, in the metric's unit (a number); None: `stats` only.
    pub export: Option<Value>,
}

/// Builds a list of readings, in `stats` order.
#[derive(Default)]
pub struct Readings(pub Vec<Reading>);

impl Readings {
    fn push(
        &mut self,
        name: &'static str,
        metric: &'static str,
        kind: Kind,
        help: &'static str,
        value: Value,
    ) {
        let export = match value {
            Value::Text(_) => None,
            ref number => Some(number.clone()),
        };
        self.0.push(Reading {
            name,
            metric,
            kind,
            help,
            value,
            export,
        });
    }

    /// A counter named alike in `stats` and Prometheus.
    pub fn counter(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.push(name, name, Kind::Counter, help, Value::Int(v));
    }

    /// A gauge named alike in `stats` and Prometheus.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.push(name, name, Kind::Gauge, help, Value::Int(v));
    }

    /// A figure whose Prometheus name differs (to carry its unit).
    pub fn renamed(
        &mut self,
        name: &'static str,
        metric: &'static str,
        kind: Kind,
        help: &'static str,
        v: Value,
    ) {
        self.push(name, metric, kind, help, v);
    }

    /// A number for `stats` only: the endpoint exports it under the same name from another
    /// block (the watch history's figures, in `stats grpc` too).
    pub fn stats_only(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.0.push(Reading {
            name,
            metric: name,
            kind: Kind::Gauge,
            help,
            value: Value::Int(v),
            export: None,
        });
    }

    /// Text, for `stats` only.
    pub fn text(&mut self, name: &'static str, help: &'static str, v: impl Into<String>) {
        self.push(name, name, Kind::Gauge, help, Value::Text(v.into()));
    }

    /// A number `stats` shows in one unit and the endpoint in another (its metric's, e.g.
    /// milliseconds as seconds): the endpoint shows `v * scale`.
    pub fn scaled(
        &mut self,
        name: &'static str,
        metric: &'static str,
        kind: Kind,
        help: &'static str,
        v: u64,
        scale: f64,
    ) {
        self.0.push(Reading {
            name,
            metric,
            kind,
            help,
            value: Value::Int(v),
            export: Some(Value::Float(v as f64 * scale)),
        });
    }

    /// A yes/no gauge: `stats` shows `yes` or `no` as spelled for it (ARCUS's `true`/`false`,
    /// `on`/`off`...), the endpoint 1 or 0.
    pub fn flag(
        &mut self,
        name: &'static str,
        metric: &'static str,
        help: &'static str,
        on: bool,
        (yes, no): (&'static str, &'static str),
    ) {
        self.0.push(Reading {
            name,
            metric,
            kind: Kind::Gauge,
            help,
            value: Value::Text(if on { yes } else { no }.into()),
            export: Some(Value::Int(u64::from(on))),
        });
    }
}
