-- v_pareto: per run, which ok variants lie on the speed-quality frontier and the speed-latency
-- frontier; one row per (run_id, variant). Columns:
--   run_id, variant
--   best_output_tok_s                     output tokens/s, best sustained (v_tradeoff)
--   quality, quality_metric      primary quality metric value (own unit) and its 'suite.metric'
--   quality_higher_is_better     direction of the quality metric (quality_scores)
--   ttft_ms_mean                 ms, time to first token at the lowest concurrency
--   on_quality_frontier          no other variant of the run is at least as fast and at least as
--                                good in quality, and strictly better in one (NULL: no quality)
--   quality_dominated_by         the fastest variant that dominates it (NULL on the frontier)
--   on_latency_frontier          the same for tokens/s (higher better) vs TTFT (lower better)
--   latency_dominated_by         the fastest variant that dominates it there
-- Failed variants and variants without tokens/s are left out.

with quality_direction as (
    select distinct run_id, suite || '.' || metric as quality_metric, higher_is_better
    from quality_scores
),

points as (
    select
        t.run_id,
        t.variant,
        t.best_output_tok_s,
        t.quality,
        t.quality_metric,
        coalesce(d.higher_is_better, true) as quality_higher_is_better,
        t.ttft_ms_mean,
        case when coalesce(d.higher_is_better, true) then t.quality else -t.quality end as quality_up
    from v_tradeoff as t
    left join quality_direction as d on t.run_id = d.run_id and t.quality_metric = d.quality_metric
    where t.status = 'ok' and t.best_output_tok_s is not null
),

quality_dominators as (
    select a.run_id, a.variant, arg_max(b.variant, b.best_output_tok_s) as dominated_by
    from points as a
    join points as b on a.run_id = b.run_id and a.variant <> b.variant
    where b.best_output_tok_s >= a.best_output_tok_s and b.quality_up >= a.quality_up
        and (b.best_output_tok_s > a.best_output_tok_s or b.quality_up > a.quality_up)
    group by a.run_id, a.variant
),

latency_dominators as (
    select a.run_id, a.variant, arg_max(b.variant, b.best_output_tok_s) as dominated_by
    from points as a
    join points as b on a.run_id = b.run_id and a.variant <> b.variant
    where b.best_output_tok_s >= a.best_output_tok_s and b.ttft_ms_mean <= a.ttft_ms_mean
        and (b.best_output_tok_s > a.best_output_tok_s or b.ttft_ms_mean < a.ttft_ms_mean)
    group by a.run_id, a.variant
),

final as (
    select
        p.run_id,
        p.variant,
        p.best_output_tok_s,
        p.quality,
        p.quality_metric,
        p.quality_higher_is_better,
        p.ttft_ms_mean,
        case when p.quality is null then null else q.dominated_by is null end as on_quality_frontier,
        q.dominated_by as quality_dominated_by,
        case when p.ttft_ms_mean is null then null else l.dominated_by is null end as on_latency_frontier,
        l.dominated_by as latency_dominated_by
    from points as p
    left join quality_dominators as q on p.run_id = q.run_id and p.variant = q.variant
    left join latency_dominators as l on p.run_id = l.run_id and p.variant = l.variant
)

select * from final
