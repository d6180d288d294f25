-- v_engine_metrics: engines side by side: each variant's speed (v_tradeoff) next to what its engine
-- reported about itself during the perf sweep (engine_metrics, phase 'perf'). One row per
-- (run_id, variant) of `variants`; the metric columns are NULL for engines that expose no metrics
-- (llama-cpp-python's server, hosted APIs). Columns:
--   run_id, variant, engine, engine_version, quantization, speculative, status
--   server_startup_s               s, server start until healthy (hosted: until it first answered)
--   best_output_tok_s                       output tokens/s, best sustained (v_tradeoff)
--   ttft_ms_mean, itl_ms_mean      ms, headline scenario (v_tradeoff)
--   kv_cache_usage_pct_mean/_max   %, KV-cache blocks in use, mean and max over the reads
--   requests_running_max           count, requests decoded at once, max over the reads
--   requests_waiting_mean/_max     count, queue length (requests not yet scheduled)
--   preemptions                    count, requests preempted during the sweep
--   prefix_cache_hit_rate          fraction of prompt tokens served from the prefix cache
--   spec_acceptance_rate           fraction of proposed draft tokens accepted (speculative decoding)
--   spec_mean_acceptance_length    tokens per target step, 1 + accepted / drafts
--   engine_generation_tokens       tokens the engine counted as generated during the sweep
--   metric_reads                   reads of the engine's metrics during the sweep

with perf as (
    select
        run_id,
        variant,
        max(value) filter (where metric = 'kv_cache_usage_pct' and stat = 'mean') as kv_cache_usage_pct_mean,
        max(value) filter (where metric = 'kv_cache_usage_pct' and stat = 'max') as kv_cache_usage_pct_max,
        max(value) filter (where metric = 'requests_running' and stat = 'max') as requests_running_max,
        max(value) filter (where metric = 'requests_waiting' and stat = 'mean') as requests_waiting_mean,
        max(value) filter (where metric = 'requests_waiting' and stat = 'max') as requests_waiting_max,
        max(value) filter (where metric = 'preemptions' and stat = 'delta') as preemptions,
        max(value) filter (where metric = 'prefix_cache_hit_rate') as prefix_cache_hit_rate,
        max(value) filter (where metric = 'spec_acceptance_rate') as spec_acceptance_rate,
        max(value) filter (where metric = 'spec_mean_acceptance_length') as spec_mean_acceptance_length,
        max(value) filter (where metric = 'generation_tokens' and stat = 'delta') as engine_generation_tokens,
        max(readings) as metric_reads
    from engine_metrics
    where phase = 'perf'
    group by run_id, variant
),

final as (
    select
        t.run_id,
        t.variant,
        t.engine,
        v.engine_version,
        t.quantization,
        t.speculative,
        t.status,
        v.server_startup_s,
        t.best_output_tok_s,
        t.ttft_ms_mean,
        t.itl_ms_mean,
        p.* exclude (run_id, variant)
    from v_tradeoff as t
    join variants as v on t.run_id = v.run_id and t.variant = v.variant
    left join perf as p on t.run_id = p.run_id and t.variant = p.variant
)

select * from final
