//! Reading requests: JSON bodies in the proto3 JSON mapping (an error names
//! the field by its JSON path, e.g. `limits.maxDepth`), and query
//! parameters (`status`, `page_size`, `after_seq`, repeated
//! `context_prefixes` and `kinds`; snake_case or lowerCamelCase).

use axum::{body::Bytes, http::HeaderMap};
use baton_proto::v1 as pb;

use super::error::HttpError;

/// Most bytes of a JSON body: gRPC's default message limit.
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// A request's body, up to [`MAX_BODY`] bytes; a longer one is
/// `RESOURCE_EXHAUSTED` naming `body`.
pub async fn read_body(body: axum::body::Body) -> Result<Bytes, HttpError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        HttpError::new(
            tonic::Code::ResourceExhausted,
            format!("body: over the limit of {MAX_BODY} bytes"),
            Some("body".into()),
        )
    })
}

/// A JSON body as the message `T`.
pub fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, HttpError> {
    if body.len() > MAX_BODY {
        return Err(HttpError::new(
            tonic::Code::ResourceExhausted,
            format!(
                "body: {} bytes is over the limit of {MAX_BODY} bytes",
                body.len()
            ),
            Some("body".into()),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            "body".to_owned()
        } else {
            path
        };
        HttpError::invalid(&field, e.inner())
    })
}

/// A SubmitInput body: `{text}` (or `{input}`, the gRPC field's name).
pub fn input_text(body: &Bytes) -> Result<String, HttpError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        text: Option<String>,
        input: Option<String>,
    }
    let a: Answer = json_body(body)?;
    match (a.text, a.input) {
        (Some(t), None) | (None, Some(t)) => Ok(t),
        (Some(_), Some(_)) => Err(HttpError::invalid(
            "text",
            "give `text` or `input`, not both",
        )),
        (None, None) => Err(HttpError::invalid("text", "is required")),
    }
}

/// A request's query parameters, in order.
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses `a=1&b=2` (none: empty).
    pub fn parse(query: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Every value of `name` (snake_case) or its lowerCamelCase form.
    fn all(&self, name: &str) -> Vec<&str> {
        let camel = camel(name);
        self.0
            .iter()
            .filter(|(k, _)| k == name || *k == camel)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, name: &str) -> Result<Option<&str>, HttpError> {
        match self.all(name).as_slice() {
            [] => Ok(None),
            [v] => Ok(Some(v)),
            _ => Err(HttpError::invalid(name, "is given more than once")),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, HttpError> {
        self.one(name)?
            .map(|v| {
                v.parse()
                    .map_err(|_| HttpError::invalid(name, format!("{v:?} is not a number")))
            })
            .transpose()
    }

    /// The ListRuns request of `status`, `waiting`, `page_size`,
    /// `page_token`.
    pub fn list_runs(&self) -> Result<pb::ListRunsRequest, HttpError> {
        self.only(&[
            "status",
            "waiting",
            "failing_scores",
            "page_size",
            "page_token",
        ])?;
        let failing_scores = match self.one("failing_scores")? {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => {
                return Err(HttpError::invalid(
                    "failing_scores",
                    format!("{v:?} is not true or false"),
                ));
            }
        };
        let waiting = match self.one("waiting")? {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => {
                return Err(HttpError::invalid(
                    "waiting",
                    format!("{v:?} is not true or false"),
                ));
            }
        };
        let status = match self.one("status")? {
            None => 0,
            Some(v) => enum_value(v, "status", |s| {
                pb::RunStatus::from_str_name(s).map(|x| x as i32)
            })?,
        };
        Ok(pb::ListRunsRequest {
            status,
            waiting,
            failing_scores,
            page_size: self.number("page_size")?.unwrap_or(0),
            page_token: self.one("page_token")?.unwrap_or_default().to_owned(),
        })
    }

    /// The ListConversations request of `page_size`, `page_token`.
    pub fn list_conversations(&self) -> Result<pb::ListConversationsRequest, HttpError> {
        self.only(&["page_size", "page_token"])?;
        Ok(pb::ListConversationsRequest {
            page_size: self.number("page_size")?.unwrap_or(0),
            page_token: self.one("page_token")?.unwrap_or_default().to_owned(),
        })
    }

    /// No query parameter at all.
    pub fn only_none(&self) -> Result<(), HttpError> {
        self.only(&[])
    }

    /// `page_size` and `page_token` (ListExperiments).
    pub fn page(&self) -> Result<(i32, String), HttpError> {
        self.only(&["page_size", "page_token"])?;
        Ok((
            self.number("page_size")?.unwrap_or(0),
            self.one("page_token")?.unwrap_or_default().to_owned(),
        ))
    }

    /// `page_size` alone (ListDeadLetters).
    pub fn page_size(&self) -> Result<u32, HttpError> {
        self.only(&["page_size"])?;
        Ok(self.number("page_size")?.unwrap_or(0))
    }

    /// `candidate` (required) and `alpha` (CompareExperiments).
    pub fn compare(&self) -> Result<(String, f64), HttpError> {
        self.only(&["candidate", "alpha"])?;
        let candidate = self
            .one("candidate")?
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                HttpError::invalid(
                    "candidate",
                    "missing: the experiment judged against the path's",
                )
            })?
            .to_owned();
        let alpha = match self.one("alpha")? {
            None => 0.0,
            Some(a) => a
                .parse()
                .map_err(|_| HttpError::invalid("alpha", format!("{a:?} is not a number")))?,
        };
        Ok((candidate, alpha))
    }

    /// The GetConversation request of `page_size`, `page_token`, `last`
    /// (its id is the path's).
    pub fn get_conversation(&self) -> Result<pb::GetConversationRequest, HttpError> {
        self.only(&["page_size", "page_token", "last"])?;
        Ok(pb::GetConversationRequest {
            conversation_id: String::new(),
            page_size: self.number("page_size")?.unwrap_or(0),
            page_token: self.one("page_token")?.unwrap_or_default().to_owned(),
            last: self.number("last")?.unwrap_or(0),
        })
    }

    /// A page of slots: `page_token` (the key after which it starts) and
    /// `page_size` (0: the store's default).
    pub fn slots_page(&self) -> Result<(Option<String>, usize), HttpError> {
        self.only(&["page_size", "page_token"])?;
        let size: usize = self.number("page_size")?.unwrap_or(0);
        let size = if size == 0 {
            baton_store::DEFAULT_PAGE_SIZE
        } else {
            size
        };
        let after = self
            .one("page_token")?
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        Ok((after, size))
    }

    /// Where a watch starts: `after_seq`, else the `Last-Event-ID` header
    /// (an EventSource that reconnects sends it), else 0.
    pub fn after_seq(&self, headers: &HeaderMap) -> Result<u64, HttpError> {
        if let Some(seq) = self.number("after_seq")? {
            return Ok(seq);
        }
        match headers.get("last-event-id").map(|v| v.to_str()) {
            None => Ok(0),
            Some(Ok(v)) => v
                .trim()
                .parse()
                .map_err(|_| HttpError::invalid("Last-Event-ID", format!("{v:?} is not a seq"))),
            Some(Err(_)) => Err(HttpError::invalid("Last-Event-ID", "is not text")),
        }
    }

    /// The watch's filter: `max_depth`, `context_prefixes`, `kinds`
    /// (`EVENT_KIND_TEXT_DELTA`, `TEXT_DELTA` or its number).
    pub fn filter(&self) -> Result<pb::EventFilter, HttpError> {
        self.only(&["after_seq", "max_depth", "context_prefixes", "kinds"])?;
        let kinds = self
            .all("kinds")
            .into_iter()
            .flat_map(|v| v.split(','))
            .filter(|v| !v.is_empty())
            .map(|v| {
                enum_value(v, "kinds", |s| {
                    pb::EventKind::from_str_name(s)
                        .or_else(|| pb::EventKind::from_str_name(&format!("EVENT_KIND_{s}")))
                        .map(|k| k as i32)
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(pb::EventFilter {
            max_depth: self.number("max_depth")?,
            context_prefixes: self
                .all("context_prefixes")
                .into_iter()
                .flat_map(|v| v.split(','))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect(),
            kinds,
        })
    }

    /// Refuses a parameter this route does not take, naming it.
    fn only(&self, known: &[&str]) -> Result<(), HttpError> {
        for (k, _) in &self.0 {
            if !known.iter().any(|n| k == n || *k == camel(n)) {
                return Err(HttpError::invalid(
                    k,
                    format!(
                        "is not a parameter of this route (it takes {})",
                        known.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// An enum given by name or number.
fn enum_value(
    v: &str,
    field: &str,
    by_name: impl Fn(&str) -> Option<i32>,
) -> Result<i32, HttpError> {
    if let Ok(n) = v.parse::<i32>() {
        return Ok(n);
    }
    by_name(&v.to_ascii_uppercase())
        .ok_or_else(|| HttpError::invalid(field, format!("{v:?} is not one of its values")))
}

fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_read_both_spellings_and_name_the_bad_parameter() {
        let q = Query::parse(Some("pageSize=5&status=RUN_STATUS_RUNNING"));
        let r = q.list_runs().expect("valid");
        assert_eq!((r.page_size, r.status), (5, pb::RunStatus::Running as i32));
        let bad = Query::parse(Some("page_size=x"))
            .list_runs()
            .expect_err("bad");
        assert!(format!("{bad:?}").contains("page_size"), "{bad:?}");
        let unknown = Query::parse(Some("colour=red"))
            .list_runs()
            .expect_err("unknown");
        assert!(format!("{unknown:?}").contains("colour"), "{unknown:?}");
        let f = Query::parse(Some(
            "kinds=text_delta&kinds=EVENT_KIND_RUN_COMPLETED&context_prefixes=root.a.1&max_depth=2",
        ))
        .filter()
        .expect("filter");
        assert_eq!(f.kinds.len(), 2);
        assert_eq!(f.context_prefixes, ["root.a.1"]);
        assert_eq!(f.max_depth, Some(2));
    }
}
