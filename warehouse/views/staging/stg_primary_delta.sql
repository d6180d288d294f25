-- stg_primary_delta: each non-reference variant's paired delta of its run's primary quality
-- metric against the reference (quality_deltas), one row per (run_id, variant). Columns:
--   run_id, variant
--   delta, ci_low, ci_high  own unit: variant - reference over the samples both have, and its interval
--   n                       paired samples
--   verdict                 better | worse | inconclusive | identical | no_ci | no_data

with final as (
    select d.run_id, d.variant, d.delta, d.ci_low, d.ci_high, d.n, d.verdict
    from quality_deltas as d
    join runs as r
        on d.run_id = r.run_id and d.suite || '.' || d.metric = r.primary_quality_metric
)

select * from final
