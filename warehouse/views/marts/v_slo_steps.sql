-- v_slo_steps: every perf step (run, variant, scenario) checked against its run's decision SLO (v_decision),
-- from the per-request latencies. The SLO percentile (p99 by default, as MLPerf) is taken over the step's
-- measured requests (warm-up excluded, all repeats pooled), with linear interpolation as numpy's default; a
-- request that errored or did not complete is a miss: it counts as an infinite latency for every limit.
-- tasks/perf/load_search.py applies the same rule to a live step (the sustainable-load search). Columns:
--   run_id, variant, scenario, load_kind, concurrency
--   request_rate                   requests/s offered by a rate step (NULL for closed-loop steps)
--   request_throughput             requests/s completed (ok requests over the step's duration)
--   load_req_s                     the step's load: request_rate where it has one, else request_throughput
--   output_tok_s                   output tokens/s over the step; output_tok_s_ci_low/_high its interval (>= 2 repeats)
--   energy_j_per_token, energy_note  J per output token over the step; why it is NULL
--   num_measured, num_misses       measured requests; those that errored or did not complete
--   slo_percentile                 e.g. 99
--   ttft_ms_pctl, tpot_ms_pctl,    ms, the step's latency at the SLO percentile (TPOT of a one-token answer is
--   e2el_ms_pctl                   0, as for goodput); NULL when the percentile falls on a miss
--   slo_ttft_ms, slo_tpot_ms, slo_e2el_ms   the limits (NULL: none)
--   slo_met                        every limit met at the percentile; NULL when the run has no SLO
--   slo_fail_reason                why not, e.g. 'p99 TTFT 2450 ms > 2000 ms' or '2 of 12 requests failed or did not complete'
--   goodput_req_s                  requests/s that met every limit of this SLO (requests, not a percentile)

with decision as (
    select run_id, slo_percentile, slo_ttft_ms, slo_tpot_ms, slo_e2el_ms
    from v_decision
),

requests as (
    select
        q.run_id,
        q.variant,
        q.scenario,
        q.status = 'ok' as ok,
        m.metric,
        case m.metric when 'ttft' then q.ttft_ms when 'tpot' then coalesce(q.tpot_ms, 0) else q.e2el_ms end as ms
    from perf_requests as q
    cross join (values ('ttft'), ('tpot'), ('e2el')) as m(metric)
    where not q.is_warmup
),

-- per step and metric: ok latencies ascending, then one +infinity per miss
sorted as (
    select
        run_id,
        variant,
        scenario,
        metric,
        count(*) as num_measured,
        count(*) filter (where not ok) as num_misses,
        list_sort(coalesce(list(ms) filter (where ok and ms is not null), []))
            || list_transform(range(count(*) filter (where not ok)), lambda x: 'infinity'::double) as ms_list
    from requests
    group by run_id, variant, scenario, metric
),

-- numpy's linear percentile: position h = (n - 1) * p / 100 between the sorted values i and i + 1 (1-based)
positioned as (
    select s.*, d.slo_percentile, (len(s.ms_list) - 1) * d.slo_percentile / 100.0 as h
    from sorted as s
    join decision as d on s.run_id = d.run_id
),

percentiles as (
    select
        run_id,
        variant,
        scenario,
        metric,
        num_measured,
        num_misses,
        slo_percentile,
        case
            when len(ms_list) = 0 then null
            when h = floor(h) or ms_list[floor(h)::int + 1] = ms_list[floor(h)::int + 2] then ms_list[floor(h)::int + 1]
            else ms_list[floor(h)::int + 1] + (h - floor(h)) * (ms_list[floor(h)::int + 2] - ms_list[floor(h)::int + 1])
        end as pctl_ms
    from positioned
),

per_step as (
    select
        run_id,
        variant,
        scenario,
        any_value(num_measured) as num_measured,
        any_value(num_misses) as num_misses,
        max(pctl_ms) filter (where metric = 'ttft') as ttft_pctl,
        max(pctl_ms) filter (where metric = 'tpot') as tpot_pctl,
        max(pctl_ms) filter (where metric = 'e2el') as e2el_pctl
    from percentiles
    group by run_id, variant, scenario
),

good as (
    select
        q.run_id,
        q.variant,
        q.scenario,
        count(*) filter (where q.status = 'ok'
            and (d.slo_ttft_ms is null or q.ttft_ms <= d.slo_ttft_ms)
            and (d.slo_tpot_ms is null or coalesce(q.tpot_ms, 0) <= d.slo_tpot_ms)
            and (d.slo_e2el_ms is null or q.e2el_ms <= d.slo_e2el_ms)) as num_good
    from perf_requests as q
    join decision as d on q.run_id = d.run_id
    where not q.is_warmup
    group by q.run_id, q.variant, q.scenario
),

checked as (
    select
        s.run_id,
        s.variant,
        s.scenario,
        coalesce(p.num_measured, 0) as num_measured,
        coalesce(p.num_misses, 0) as num_misses,
        d.slo_percentile,
        p.ttft_pctl,
        p.tpot_pctl,
        p.e2el_pctl,
        d.slo_ttft_ms,
        d.slo_tpot_ms,
        d.slo_e2el_ms,
        d.slo_ttft_ms is null and d.slo_tpot_ms is null and d.slo_e2el_ms is null as no_slo,
        d.slo_ttft_ms is not null and not coalesce(p.ttft_pctl <= d.slo_ttft_ms, false) as ttft_missed,
        d.slo_tpot_ms is not null and not coalesce(p.tpot_pctl <= d.slo_tpot_ms, false) as tpot_missed,
        d.slo_e2el_ms is not null and not coalesce(p.e2el_pctl <= d.slo_e2el_ms, false) as e2el_missed
    from perf_summary as s
    join decision as d on s.run_id = d.run_id
    left join per_step as p on s.run_id = p.run_id and s.variant = p.variant and s.scenario = p.scenario
),

final as (
    select
        c.run_id,
        c.variant,
        c.scenario,
        s.load_kind,
        s.concurrency,
        s.request_rate,
        s.request_throughput,
        coalesce(s.request_rate, s.request_throughput) as load_req_s,
        s.output_throughput as output_tok_s,
        s.output_throughput_ci_low as output_tok_s_ci_low,
        s.output_throughput_ci_high as output_tok_s_ci_high,
        s.energy_j_per_token,
        s.energy_note,
        c.num_measured,
        c.num_misses,
        c.slo_percentile,
        case when isinf(c.ttft_pctl) then null else c.ttft_pctl end as ttft_ms_pctl,
        case when isinf(c.tpot_pctl) then null else c.tpot_pctl end as tpot_ms_pctl,
        case when isinf(c.e2el_pctl) then null else c.e2el_pctl end as e2el_ms_pctl,
        c.slo_ttft_ms,
        c.slo_tpot_ms,
        c.slo_e2el_ms,
        case when c.no_slo then null else not (c.ttft_missed or c.tpot_missed or c.e2el_missed) end as slo_met,
        case
            when c.no_slo then 'no SLO: set decision.slo or perf.slo'
            when c.num_measured = 0 then 'no measured request'
            when c.ttft_missed or c.tpot_missed or c.e2el_missed then concat_ws('; ',
                case when c.num_misses > 0 then c.num_misses || ' of ' || c.num_measured || ' requests failed or did not complete' end,
                case when c.ttft_missed and not isinf(c.ttft_pctl) then printf('p%g TTFT %.0f ms > %g ms', c.slo_percentile, c.ttft_pctl, c.slo_ttft_ms) end,
                case when c.tpot_missed and not isinf(c.tpot_pctl) then printf('p%g TPOT %.1f ms > %g ms', c.slo_percentile, c.tpot_pctl, c.slo_tpot_ms) end,
                case when c.e2el_missed and not isinf(c.e2el_pctl) then printf('p%g E2EL %.0f ms > %g ms', c.slo_percentile, c.e2el_pctl, c.slo_e2el_ms) end)
        end as slo_fail_reason,
        g.num_good / nullif(s.duration_s, 0) as goodput_req_s
    from checked as c
    join perf_summary as s on c.run_id = s.run_id and c.variant = s.variant and c.scenario = s.scenario
    left join good as g on c.run_id = g.run_id and c.variant = g.variant and c.scenario = g.scenario
)

select * from final
