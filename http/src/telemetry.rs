//! What the layer tells tracing and, with the `metrics` feature, the `metrics` facade:
//! the route a request took, and one event per decision.

use std::fmt;

use http::Method;
use http::request::Parts;
use idem::{Fingerprint, Operation, OperationError};

use crate::problem::ProblemType;

/// The route a request took: its method and its route template (axum's `MatchedPath`), or
/// "unmatched" when there is no template (no route matched, or the layer sits outside the
/// router). The raw path never names an operation or a counter's label: a client that
/// sends a new path with each request would otherwise make a new time series (and a new
/// key space) each time.
pub(crate) struct Route {
    method: Method,
    template: Template,
}

enum Template {
    #[cfg(feature = "axum")]
    Matched(axum::extract::MatchedPath),
    #[cfg(test)]
    Given(&'static str),
    Unmatched,
}

impl Template {
    fn as_str(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "axum")]
            Template::Matched(matched) => Some(matched.as_str()),
            #[cfg(test)]
            Template::Given(template) => Some(template),
            Template::Unmatched => None,
        }
    }
}

impl Route {
    pub(crate) fn of(parts: &Parts) -> Self {
        #[cfg(feature = "axum")]
        if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
            return Self {
                method: parts.method.clone(),
                template: Template::Matched(matched.clone()),
            };
        }
        Self {
            method: parts.method.clone(),
            template: Template::Unmatched,
        }
    }

    /// The operation named after this route: the method, then the template with `/` as
    /// `.` and every byte other than an ASCII letter, digit or `-` written `_XX` (hex), so
    /// that two routes never share a name (`POST /charges` is `POST.charges`,
    /// `POST /orders/{id}/refund` is `POST.orders._7Bid_7D.refund`). A name longer than
    /// `max` bytes is replaced by `h-` and 128 bits of a SHA-256 of the method and template.
    /// Without a template, the method and `_unmatched`, which no template's name can be
    /// (an escape's `_` is always followed by two hex digits): every unmatched request of a
    /// method shares one key space, and the fingerprint (which covers the path) tells its
    /// requests apart.
    pub(crate) fn operation(&self, max: usize) -> Result<Operation, OperationError> {
        let Some(template) = self.template.as_str() else {
            let mut name = String::with_capacity(self.method.as_str().len() + 10);
            escape(self.method.as_str(), &mut name);
            name.push_str("_unmatched");
            if name.len() > max {
                let digest = Fingerprint::of_bytes(format!("{} unmatched", self.method).as_bytes());
                name = format!("h-{}", &digest.to_string()[..32]);
            }
            return Operation::new(name);
        };
        let mut name = String::with_capacity(self.method.as_str().len() + template.len() + 8);
        escape(self.method.as_str(), &mut name);
        if !template.starts_with('/') {
            // A space can occur in neither a method nor a path: the escape of one keeps a
            // template without a leading `/` apart from every template with one.
            name.push_str("_20");
        }
        escape(template, &mut name);
        if name.len() > max {
            let digest = Fingerprint::of_bytes(format!("{} {template}", self.method).as_bytes());
            name = format!("h-{}", &digest.to_string()[..32]);
        }
        Operation::new(name)
    }

    /// Counts `event` for this route.
    pub(crate) fn count(&self, event: Event) {
        #[cfg(feature = "metrics")]
        {
            let route = self.to_string();
            match event {
                Event::Problem(kind) => {
                    metrics::counter!(event.name(), "route" => route, "type" => kind.name())
                        .increment(1);
                }
                _ => metrics::counter!(event.name(), "route" => route).increment(1),
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = event;
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.template.as_str() {
            Some(template) => write!(f, "{} {template}", self.method),
            None => write!(f, "{} (unmatched)", self.method),
        }
    }
}

/// `/` → `.`; ASCII letters, digits and `-` kept; any other byte → `_XX`.
fn escape(text: &str, out: &mut String) {
    use std::fmt::Write;
    for byte in text.bytes() {
        match byte {
            b'/' => out.push('.'),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "_{byte:02X}");
            }
        }
    }
}

/// One decision of the layer, counted per route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The handler ran under a reservation and its response was recorded.
    Executed,
    /// A stored response was replayed.
    Replayed,
    /// The request found an identical one holding the key and waited for it.
    Waited,
    /// Answered 409: an identical request is in progress.
    Conflict,
    /// Answered 422: the key was used for another request.
    KeyReuse,
    /// The handler's response was released, not recorded ([`Disposition::Release`], or
    /// the inner service was not ready).
    ///
    /// [`Disposition::Release`]: crate::Disposition::Release
    Released,
    /// The response's outcome is unknown ([`Disposition::Unknown`]: a server error or 408
    /// the handler did not mark, a service error, a panic): recorded as such, never
    /// released.
    ///
    /// [`Disposition::Unknown`]: crate::Disposition::Unknown
    Unknown,
    /// The handler ran unprotected: the store failed open.
    FailedOpen,
    /// The handler ran, but its lease lapsed while it did.
    LeaseLost,
    /// Answered with a problem of this type.
    Problem(ProblemType),
}

impl Event {
    /// One event of each counter (a problem stands for every problem type): the per-route
    /// counters [`crate::metrics::exported`] lists. A new variant goes here too.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const COUNTERS: [Event; 10] = [
        Event::Executed,
        Event::Replayed,
        Event::Waited,
        Event::Conflict,
        Event::KeyReuse,
        Event::Released,
        Event::Unknown,
        Event::FailedOpen,
        Event::LeaseLost,
        Event::Problem(ProblemType::Internal),
    ];

    /// The counter's labels: `route`, and `type` for a problem.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn labels(self) -> &'static [&'static str] {
        match self {
            Event::Problem(_) => &["route", "type"],
            _ => &["route"],
        }
    }

    /// The counter's name.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Event::Executed => "idem_http_executed_total",
            Event::Replayed => "idem_http_replays_total",
            Event::Waited => "idem_http_waits_total",
            Event::Conflict => "idem_http_conflicts_total",
            Event::KeyReuse => "idem_http_key_reuse_total",
            Event::Released => "idem_http_released_total",
            Event::Unknown => "idem_http_outcome_unknown_total",
            Event::FailedOpen => "idem_http_failed_open_total",
            Event::LeaseLost => "idem_http_lease_lost_total",
            Event::Problem(_) => "idem_http_problems_total",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation(method: Method, template: &'static str, max: usize) -> String {
        Route {
            method,
            template: Template::Given(template),
        }
        .operation(max)
        .unwrap()
        .as_str()
        .to_owned()
    }

    fn unmatched(method: Method, path: &str) -> Route {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap();
        Route::of(&request.into_parts().0)
    }

    #[test]
    fn every_event_has_its_counter_listed_once() {
        // Exhaustive: a new variant stops this test compiling until it is looked at here.
        let listed = |event: Event| {
            let problem = matches!(event, Event::Problem(_));
            match event {
                Event::Executed
                | Event::Replayed
                | Event::Waited
                | Event::Conflict
                | Event::KeyReuse
                | Event::Released
                | Event::Unknown
                | Event::FailedOpen
                | Event::LeaseLost
                | Event::Problem(_) => Event::COUNTERS
                    .iter()
                    .any(|c| c.name() == event.name() && c.labels().contains(&"type") == problem),
            }
        };
        for event in [
            Event::Executed,
            Event::Replayed,
            Event::Waited,
            Event::Conflict,
            Event::KeyReuse,
            Event::Released,
            Event::Unknown,
            Event::FailedOpen,
            Event::LeaseLost,
            Event::Problem(ProblemType::KeyMissing),
            Event::Problem(ProblemType::CorruptRecord),
        ] {
            assert!(listed(event), "{event:?}");
        }
        let mut names: Vec<&str> = Event::COUNTERS.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Event::COUNTERS.len(), "{names:?}");
    }

    #[test]
    fn routes_name_operations_readably_and_never_two_alike() {
        assert_eq!(operation(Method::POST, "/charges", 100), "POST.charges");
        assert_eq!(operation(Method::PATCH, "/charges", 100), "PATCH.charges");
        assert_eq!(operation(Method::POST, "/a.b", 100), "POST.a_2Eb");
        assert_eq!(operation(Method::POST, "/a/b", 100), "POST.a.b");
        assert_eq!(operation(Method::POST, "/a_b", 100), "POST.a_5Fb");
        assert_eq!(operation(Method::POST, "/a_2Eb", 100), "POST.a_5F2Eb");
        assert_eq!(operation(Method::POST, "/", 100), "POST.");
        assert_eq!(operation(Method::OPTIONS, "*", 100), "OPTIONS_20_2A");
        let long: &'static str = format!("/{}", "x".repeat(80)).leak();
        let hashed = operation(Method::POST, long, 65);
        assert!(hashed.starts_with("h-") && hashed.len() == 34, "{hashed}");
        assert_ne!(hashed, operation(Method::PATCH, long, 65));
        assert_eq!(operation(Method::POST, long, 100).len(), 85);
    }

    #[test]
    fn a_request_without_a_template_is_named_and_labelled_unmatched_whatever_its_path() {
        for path in ["/charges", "/x/9f1c2a", "/unmatched", "/_unmatched"] {
            let route = unmatched(Method::POST, path);
            assert_eq!(route.operation(100).unwrap().as_str(), "POST_unmatched");
            assert_eq!(route.to_string(), "POST (unmatched)");
        }
        // No template's name is the unmatched one, however it is spelled.
        for template in ["/unmatched", "_unmatched", "/_unmatched", "unmatched"] {
            assert_ne!(operation(Method::POST, template, 100), "POST_unmatched");
        }
    }
}
