-- v_retention: per (run_id, variant, suite, metric), the share of the reference's score the
-- variant keeps, and its MLPerf-style accuracy class. Columns:
--   run_id, variant, suite, metric, unit (fraction | nats | ratio | count), higher_is_better (NULL
--                                 read as true)
--   reference_value, value        the two scores compared (own unit): where the metric has a
--                                 quality_deltas row, that row's reference_value and value (over
--                                 the samples both variants have); else the suite's scores
--                                 (the reference's own rows)
--   retention                     ratio: value / reference for higher-is-better metrics,
--                                 reference / value for lower-is-better ones; NULL when a side is
--                                 NULL or a denominator is 0 (e.g. KL of the reference itself)
--   retention_99, retention_999   retention >= 0.99 / >= 0.999 (MLPerf's 99 % and 99.9 % targets)
--   retention_class               '>= 99.9 %' | '>= 99 %' | '< 99 %' | NULL
-- One definition with tasks/quality/deltas.py retention() (quality_deltas.retention_99/_999): the same two
-- scores, the same double division and a plain >= against the double level, no tolerance.
-- Only ok variants of runs with exactly one reference.

with reference as (
    select s.run_id, s.suite, s.metric, s.value as reference_value
    from quality_scores as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    where v.is_reference
    qualify count(*) over (partition by s.run_id, s.suite, s.metric) = 1
),

scored as (
    select
        s.run_id,
        s.variant,
        s.suite,
        s.metric,
        s.unit,
        coalesce(s.higher_is_better, true) as higher_is_better,
        case when d.run_id is null then r.reference_value else d.reference_value end as reference_value,
        case when d.run_id is null then s.value else d.value end as value
    from quality_scores as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    join reference as r on s.run_id = r.run_id and s.suite = r.suite and s.metric = r.metric
    left join quality_deltas as d
        on s.run_id = d.run_id and s.variant = d.variant and s.suite = d.suite and s.metric = d.metric
    where v.status = 'ok'
),

ratios as (
    select
        *,
        case
            when higher_is_better then value / nullif(reference_value, 0)
            else nullif(reference_value, 0) / nullif(value, 0)
        end as retention
    from scored
),

final as (
    select
        *,
        retention >= 0.99::double as retention_99,
        retention >= 0.999::double as retention_999,
        case
            when retention is null then null
            when retention >= 0.999::double then '>= 99.9 %'
            when retention >= 0.99::double then '>= 99 %'
            else '< 99 %'
        end as retention_class
    from ratios
)

select * from final
