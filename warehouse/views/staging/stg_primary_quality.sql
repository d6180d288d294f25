-- stg_primary_quality: each variant's value of its run's primary quality metric
-- (runs.primary_quality_metric, 'suite.metric'), one row per (run_id, variant). Columns:
--   run_id, variant
--   quality                 the metric's value, in its own unit
--   quality_metric          'suite.metric'
--   unit, higher_is_better  of that metric (quality_scores)

with final as (
    select
        s.run_id,
        s.variant,
        s.value as quality,
        r.primary_quality_metric as quality_metric,
        s.unit,
        s.higher_is_better
    from quality_scores as s
    join runs as r
        on s.run_id = r.run_id and s.suite || '.' || s.metric = r.primary_quality_metric
)

select * from final
