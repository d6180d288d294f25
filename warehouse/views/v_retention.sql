-- v_retention: per (run_id, variant, suite, metric), the share of the reference's score the
-- variant keeps, and its MLPerf-style accuracy class. Columns:
--   run_id, variant, suite, metric, unit (fraction | nats | ratio | count), higher_is_better (NULL
--                                 read as true)
--   reference_value, value        the reference's and the variant's score (own unit)
--   retention                     ratio: value / reference for higher-is-better metrics,
--                                 reference / value for lower-is-better ones; NULL when a side is
--                                 NULL or a denominator is 0 (e.g. KL of the reference itself)
--   retention_99, retention_999   retention >= 0.99 / >= 0.999 (MLPerf's 99 % and 99.9 % targets)
--   retention_class               '>= 99.9 %' | '>= 99 %' | '< 99 %' | NULL
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
        r.reference_value,
        s.value,
        case
            when coalesce(s.higher_is_better, true) then s.value / nullif(r.reference_value, 0)
            else nullif(r.reference_value, 0) / nullif(s.value, 0)
        end as retention
    from quality_scores as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    join reference as r on s.run_id = r.run_id and s.suite = r.suite and s.metric = r.metric
    where v.status = 'ok'
),

final as (
    select
        *,
        retention >= 0.99 as retention_99,
        retention >= 0.999 as retention_999,
        case
            when retention is null then null
            when retention >= 0.999 then '>= 99.9 %'
            when retention >= 0.99 then '>= 99 %'
            else '< 99 %'
        end as retention_class
    from scored
)

select * from final
