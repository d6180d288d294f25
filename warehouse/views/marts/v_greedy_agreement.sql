-- v_greedy_agreement: each variant's greedy outputs against the reference's on the same prompts
-- (same run, suite and sample), e.g. vLLM on a dequantized checkpoint against llama.cpp's Q4 kernels.
-- One row per (run_id, variant, suite) of a non-reference variant, for suites that store responses.
-- Agreement is measured, not expected: different kernels and number formats may flip a greedy
-- choice, after which the texts part ways. Columns:
--   run_id, variant, engine, reference_variant, suite
--   n_prompts                      prompts both variants answered (response not NULL)
--   n_identical                    responses identical to the reference's, character for character
--   identical_rate                 n_identical / n_prompts (fraction)
--   common_prefix_share_mean       mean over prompts of (characters in common from the start) / (reference
--                                  response length); 1 for identical responses
--   first_difference_chars_median  median character index of the first difference, over differing responses

with ref as (
    select s.run_id, s.suite, s.sample_id, s.response, s.variant as reference_variant
    from quality_samples as s
    join runs as r on s.run_id = r.run_id and s.variant = r.reference_variant
    where s.response is not null
),

pairs as (
    select
        v.run_id,
        v.variant,
        v.suite,
        v.sample_id,
        ref.reference_variant,
        v.response as resp,
        ref.response as ref_resp,
        least(length(v.response), length(ref.response)) as n
    from quality_samples as v
    join ref on v.run_id = ref.run_id and v.suite = ref.suite and v.sample_id = ref.sample_id
    where v.variant <> ref.reference_variant and v.response is not null
),

scored as (
    select
        *,
        resp = ref_resp as identical,
        coalesce(
            list_position(list_transform(range(1, n + 1), lambda i: substr(resp, i, 1) = substr(ref_resp, i, 1)), false) - 1,
            n
        ) as common_prefix_chars
    from pairs
),

final as (
    select
        s.run_id,
        s.variant,
        v.engine,
        s.reference_variant,
        s.suite,
        count(*) as n_prompts,
        count(*) filter (where s.identical) as n_identical,
        avg(s.identical::int) as identical_rate,
        avg(case when s.identical then 1.0 else s.common_prefix_chars / greatest(length(s.ref_resp), 1) end)
            as common_prefix_share_mean,
        median(s.common_prefix_chars) filter (where not s.identical) as first_difference_chars_median
    from scored as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    group by s.run_id, s.variant, v.engine, s.reference_variant, s.suite
)

select * from final
