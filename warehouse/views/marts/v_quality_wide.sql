-- v_quality_wide: one row per (run_id, variant) that has quality scores, one double column per
-- metric, named <suite>_<metric> (non-alphanumerics -> _), in the metric's own unit (see
-- quality_scores.unit). DuckDB cannot PIVOT on data-derived values inside a view, so this file is
-- a template: refresh_views (warehouse/db.py) replaces the metric_columns comment below with one
-- `max(value) filter (where suite = ... and metric = ...)` column per distinct (suite, metric).

with scores as (
    select run_id, variant, suite, metric, value
    from quality_scores
),

final as (
    select
        run_id,
        variant
        /* metric_columns */
    from scores
    group by run_id, variant
)

select * from final
