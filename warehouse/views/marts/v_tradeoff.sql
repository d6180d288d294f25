-- v_tradeoff: one row per (run_id, variant) of `variants`, failed variants included. Columns:
--   run_id
--   started_at                     run start, UTC (timestamp without time zone)
--   variant, engine, model, quantization, speculative (method, NULL when none)
--   is_reference                   the variant the others are compared with
--   status                         ok | failed
--   error                          first error of a failed variant
--   peak_output_tok_s                       output tokens/s, best window, max over the variant's scenarios
--   best_output_tok_s                       output tokens/s, best sustained: max over its scenarios
--   ttft_ms_mean, ttft_ms_p99      ms, time to first token, headline scenario
--   itl_ms_mean                    ms, inter-token latency, headline scenario
--   tpot_ms_mean                   ms per output token, headline scenario
--   energy_j_per_token             joules per output token, in the scenario that gave best_output_tok_s
--   energy_note                    why energy_j_per_token is NULL
--   quality                        value of the run's primary quality metric, in its own unit
--   quality_metric                 that metric, 'suite.metric' (runs.primary_quality_metric)
--   goodput_req_s                  requests/s meeting every SLO limit, headline scenario
--   mbu_pct                        %, model bandwidth utilisation, headline scenario (concurrency 1)
--   ttft_ms_mean_ci_low, _ci_high     ms, log-scale t interval over the repeats' TTFT means (decision.confidence;
--                                  run-to-run variation only; NULL under 2 repeats)
--   ttft_cv_pct                    %, TTFT jitter of the jitter scenario: the median over repeats of each
--                                  repeat's coefficient of variation (sample std / mean) of TTFT; NULL for
--                                  rows loaded without it (before 007): the CV pooled over repeats and
--                                  prompt lengths (perf_summary.ttft_cv_pct_pooled) is not jitter
--   ttft_cv_pct_ci_low, _ci_high      %, interval of ttft_cv_pct over the repeats; NULL below 2 (jitter_note)
--   itl_cv_pct                     %, ITL jitter likewise: each repeat's CV of its pooled chunk gaps, median
--   itl_cv_pct_ci_low, _ci_high       %, interval of itl_cv_pct over the repeats; NULL below 2 (jitter_note)
--   jitter_scenario                the scenario the jitter figures come from: `jitter` (the fixed-length
--                                  concurrency-1 workload, perf.jitter) when it ran, else the headline
--   jitter_note                    why a jitter figure or its interval is NULL
--   speedup_vs_reference           ratio, best_output_tok_s / reference best_output_tok_s
--   ttft_change_pct_vs_reference   %, (ttft_ms_mean / reference ttft_ms_mean - 1) * 100
--   ttft_cv_ratio_vs_reference     ratio, ttft_cv_pct / reference ttft_cv_pct
--   itl_cv_ratio_vs_reference      ratio, itl_cv_pct / reference itl_cv_pct (speculative decoding moves it)
--   quality_delta_vs_reference     quality - reference quality, in the metric's own unit
--   quality_delta_ci_low, _ci_high paired interval of the primary metric's delta over the samples
--                                  both variants have (quality_deltas: Tango or BCa; own unit)
--   quality_delta_n                paired samples behind that interval
--   quality_verdict                better | worse | inconclusive | identical | no_ci | no_data
--   then every metric column of v_quality_wide (<suite>_<metric>, own unit)
-- The headline scenario is stg_headline_scenario's: the lowest-concurrency one, the latency a single user
-- sees. The `jitter` scenario is a measuring instrument for the jitter figures only: speed and latency
-- never come from it.
-- Comparisons are NULL when either side is NULL, a denominator is 0, or a run has not exactly
-- one reference variant.

with headline as (
    select * from stg_headline_scenario
),

best_sustained as (
    select *
    from perf_summary
    where scenario <> 'jitter'
    qualify row_number() over (
        partition by run_id, variant order by output_throughput desc nulls last, concurrency, scenario
    ) = 1
),

peak as (
    select run_id, variant, max(peak_output_throughput) as peak_output_tok_s
    from perf_summary
    where scenario <> 'jitter'
    group by run_id, variant
),

jitter as (
    select *
    from perf_summary
    qualify row_number() over (
        partition by run_id, variant order by scenario = 'jitter' desc, concurrency, scenario
    ) = 1
),

primary_quality as (
    select run_id, variant, quality from stg_primary_quality
),

measured as (
    select
        v.run_id,
        timezone('UTC', r.started_at) as started_at,
        v.variant,
        v.engine,
        v.model,
        v.quantization,
        v.speculative,
        v.is_reference,
        v.status,
        v.error,
        p.peak_output_tok_s,
        b.output_throughput as best_output_tok_s,
        h.ttft_ms_mean,
        h.ttft_ms_p99,
        h.itl_ms_mean,
        h.tpot_ms_mean,
        b.energy_j_per_token,
        b.energy_note,
        q.quality,
        r.primary_quality_metric as quality_metric,
        h.request_goodput as goodput_req_s,
        h.mbu_pct,
        h.ttft_ms_mean_ci_low,
        h.ttft_ms_mean_ci_high,
        j.ttft_cv_pct_median as ttft_cv_pct,
        j.ttft_cv_pct_median_ci_low as ttft_cv_pct_ci_low,
        j.ttft_cv_pct_median_ci_high as ttft_cv_pct_ci_high,
        j.itl_cv_pct_median as itl_cv_pct,
        j.itl_cv_pct_median_ci_low as itl_cv_pct_ci_low,
        j.itl_cv_pct_median_ci_high as itl_cv_pct_ci_high,
        j.scenario as jitter_scenario,
        j.jitter_note
    from variants as v
    join runs as r on v.run_id = r.run_id
    left join peak as p on v.run_id = p.run_id and v.variant = p.variant
    left join best_sustained as b on v.run_id = b.run_id and v.variant = b.variant
    left join headline as h on v.run_id = h.run_id and v.variant = h.variant
    left join jitter as j on v.run_id = j.run_id and v.variant = j.variant
    left join primary_quality as q on v.run_id = q.run_id and v.variant = q.variant
),

primary_delta as (
    select run_id, variant, ci_low, ci_high, n, verdict from stg_primary_delta
),

reference as (
    select run_id, best_output_tok_s, ttft_ms_mean, ttft_cv_pct, itl_cv_pct, quality
    from measured
    where is_reference
    -- two references would duplicate every row; compare with none instead
    qualify count(*) over (partition by run_id) = 1
),

final as (
    select
        m.*,
        m.best_output_tok_s / nullif(ref.best_output_tok_s, 0) as speedup_vs_reference,
        (m.ttft_ms_mean / nullif(ref.ttft_ms_mean, 0) - 1) * 100 as ttft_change_pct_vs_reference,
        m.ttft_cv_pct / nullif(ref.ttft_cv_pct, 0) as ttft_cv_ratio_vs_reference,
        m.itl_cv_pct / nullif(ref.itl_cv_pct, 0) as itl_cv_ratio_vs_reference,
        m.quality - ref.quality as quality_delta_vs_reference,
        pd.ci_low as quality_delta_ci_low,
        pd.ci_high as quality_delta_ci_high,
        pd.n as quality_delta_n,
        pd.verdict as quality_verdict,
        w.* exclude (run_id, variant)
    from measured as m
    left join reference as ref on m.run_id = ref.run_id
    left join primary_delta as pd on m.run_id = pd.run_id and m.variant = pd.variant
    left join v_quality_wide as w on m.run_id = w.run_id and m.variant = w.variant
)

select * from final
