//! Adding usages up (a leaf): every counter of `Usage` summed, the
//! currency of the first that has one kept (a run's prices are in one
//! currency: the agents file's, checked when it is read).

use baton_proto::v1 as pb;

/// Adds `u` to `total`.
pub fn add(total: &mut pb::Usage, u: &pb::Usage) {
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    total.model_calls += u.model_calls;
    total.tool_calls += u.tool_calls;
    total.cached_input_tokens += u.cached_input_tokens;
    total.cost_nanos += u.cost_nanos;
    total.unpriced_model_calls += u.unpriced_model_calls;
    if total.currency.is_empty() && !u.currency.is_empty() {
        total.currency.clone_from(&u.currency);
    }
}

/// `u`'s counters as a journal record keeps them: `[input, output, model
/// calls, tool calls, cached input, cost, unpriced calls]` (records from
/// before costs have the first four).
pub fn to_record(u: &pb::Usage) -> Vec<u64> {
    vec![
        u.input_tokens,
        u.output_tokens,
        u.model_calls,
        u.tool_calls,
        u.cached_input_tokens,
        u.cost_nanos,
        u.unpriced_model_calls,
    ]
}

/// See [`to_record`].
pub fn from_record(r: &[u64], currency: Option<String>) -> pb::Usage {
    let at = |i: usize| r.get(i).copied().unwrap_or(0);
    pb::Usage {
        input_tokens: at(0),
        output_tokens: at(1),
        model_calls: at(2),
        tool_calls: at(3),
        cached_input_tokens: at(4),
        cost_nanos: at(5),
        unpriced_model_calls: at(6),
        currency: currency.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usages_add_up_and_a_record_reads_back_old_or_new() {
        let priced = pb::Usage {
            input_tokens: 10,
            output_tokens: 2,
            model_calls: 1,
            cached_input_tokens: 4,
            cost_nanos: 26_000,
            currency: "USD".into(),
            ..Default::default()
        };
        let unpriced = pb::Usage {
            input_tokens: 5,
            model_calls: 1,
            tool_calls: 3,
            unpriced_model_calls: 1,
            ..Default::default()
        };
        let mut total = pb::Usage::default();
        add(&mut total, &unpriced);
        add(&mut total, &priced);
        assert_eq!(
            (total.input_tokens, total.model_calls, total.cost_nanos),
            (15, 2, 26_000)
        );
        assert_eq!(
            (total.unpriced_model_calls, total.currency.as_str()),
            (1, "USD")
        );
        assert_eq!(from_record(&to_record(&total), Some("USD".into())), total);
        // A record from before costs.
        let old = from_record(&[1, 2, 3, 4], None);
        assert_eq!((old.tool_calls, old.cost_nanos), (4, 0));
    }
}
