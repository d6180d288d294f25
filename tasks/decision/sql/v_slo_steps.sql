-- v_slo_steps: every perf step (run, variant, scenario) judged against its run's decision SLO (v_decision), from
-- the per-request latencies: what its requests support about the SLO percentile, and for a rate step whether its
-- load was sustained. tasks/decision/slo.py applies the same rule to a live step (the sustainable-load search);
-- tests/integration/test_recommend.py holds the two equal. The rule (MLPerf LoadGen's early stopping):
-- over the step's measured requests (warm-up excluded, repeats pooled: n), a request that errored or did not
-- complete is over every limit; with `over` requests over a limit, p = slo_percentile / 100, q = 1 - p and
-- c = slo_confidence, the percentile is
--   shown within the limit when over <= max_over_allowed, the largest t with P(Binomial(n, q) <= t) <= 1 - c
--     (then the order statistic X_(n - t), a one-sided upper confidence bound of the percentile, is within it);
--   shown above it when over >= the smallest t with P(Binomial(n, q) >= t) <= 1 - c;
--   otherwise not shown either way: not_enough_requests, with the requests needed (all further ones within).
-- Correlated requests (requests in flight together share a batch; a repeat's requests share its host state; a
-- neighbour's drift) carry less: the claim counts n_eff = n / deff of them, deff the design effect of the limited
-- latency's ranks (Geyer's initial positive sequence; tasks.core.percentiles.effective_requests), and `over` as
-- ceil(over n_eff / n) (docs/statistics.md, section 1c).
-- The binomial probabilities are summed here from lgamma terms (DuckDB has no binomial quantile); Python takes
-- them from scipy (tasks/core/percentiles.py); both treat probabilities within 1e-9 of 1 - c as equal to it.
-- TTFT is the time to the first answer token for a request that reasoned first (reasoning_tokens > 0), else to
-- the first token; TPOT of a one-token answer is 0, as for goodput.
-- A trace step (load_kind 'trace': a request trace replayed at its own timestamps) is open loop as a rate step is
-- and judged by the same rules (its load is its measured arrival rate); an open-loop step that a stopping rule
-- ended because its queue kept growing (perf_summary.saturated) is not sustained, whatever its requests show.
-- A rate step is sustained when, over its repeats' measured requests, the achieved rate (least-squares slope of
-- the ok requests' completion count on their return times) is at least min_rate_ratio of the offered rate
-- (slope of the arrival count on the send times), means over the repeats: the backlog grows by their difference
-- per second.
-- Columns:
--   run_id, variant, scenario, load_kind, concurrency
--   is_rate_step                   an open-loop Poisson step (rates, sweep rates, search steps)
--   request_rate                   requests/s offered by a rate step (NULL for closed-loop steps)
--   request_throughput, _ci_low/_high   requests/s completed (ok requests over the step's duration), interval
--   load_req_s                     the step's load: a rate step's offered request_rate (valid only when sustained),
--                                  else request_throughput
--   output_tok_s                   output tokens/s over the step; output_tok_s_ci_low/_high its interval (>= 2 repeats)
--   energy_j_per_token, energy_note  J per output token over the step; why it is NULL
--   num_measured, num_misses       measured requests (n); those that errored or did not complete
--   slo_percentile, slo_confidence e.g. 99 and 0.95
--   max_over_allowed               the most requests over a limit with which the percentile is still shown
--                                  within it (-1: n is too small even with none over)
--   ttft_over, tpot_over, e2el_over   requests over each limit (failed ones included); NULL: no such limit
--   ttft_ms_pctl, tpot_ms_pctl,    ms, numpy's linear percentile of the step (the point estimate); NULL when it
--   e2el_ms_pctl                   falls on a failed request
--   ttft_ms_bound, tpot_ms_bound,  ms, the one-sided upper confidence bound of the percentile (the order statistic
--   e2el_ms_bound                  X_(n - max_over_allowed)); NULL when n is too small or it is a failed request
--   slo_ttft_ms, slo_tpot_ms, slo_e2el_ms   the limits (NULL: none)
--   offered_req_s, achieved_req_s  rate steps: measured arrival and completion rates, mean over the repeats
--   achieved_ratio                 achieved_req_s / offered_req_s
--   sustained                      achieved_ratio >= min_rate_ratio; NULL for closed-loop steps
--   slo_status                     met | missed | not_sustained | not_enough_requests | no_requests; NULL: no SLO
--   slo_met                        slo_status = 'met'; NULL when the run has no SLO
--   n_needed                       not_enough_requests: requests the step would need, every further one within
--   slo_fail_reason                why not met, e.g. 'p99 TTFT > 2000 ms (7 of 300 over)' or
--                                  'p99 TTFT <= 2000 ms not shown at 95 % (0 of 12 over, 0 allowed); 299 requests needed'
--   goodput_req_s                  requests/s that met every limit of this SLO (requests, not a percentile)
--   duration_s                     s, the step's measured span (perf_summary): goodput's denominator
--   is_trace_step                  a request trace replayed at its own timestamps (017_traffic)
--   slo_attainment_pct             %, measured requests that met every limit of this SLO (failed ones did not)
--   saturated, stop_reason         the step was stopped early because its queue kept growing (tasks/perf/stopping.py)
--   send_error_ms_p99              ms, p99 of actual - scheduled send time (rate and trace steps)
--   n_effective                    the requests the percentile claim counts: num_measured / requests_deff, at
--                                  least 1 (tasks.core.percentiles.effective_requests); num_measured when independent
--   requests_deff                  the design effect (>= 1) of the limited latency with the fewest n_effective: what
--                                  one request counts for; NULL: under 3 requests, or no repeat with 2
--   slo_looks                      most looks planned at the step's claim (decision.extend; 1: none)
--   claim_confidence               the confidence its claim is judged at: 1 - (1 - slo_confidence) / slo_looks
--   repeats_added, extend_note     repeats added to gather what the claim lacked, and what was done or why not

with decision as (
    select run_id, slo_percentile, slo_confidence, min_rate_ratio, slo_ttft_ms, slo_tpot_ms, slo_e2el_ms
    from v_decision
),

-- the confidence each step's claim is judged at: a step with several planned looks (decision.extend) judges every
-- look at 1 - (1 - c) / looks, so the claim keeps c whichever look it stopped at (tasks.core.percentiles.look_confidence)
step_conf as (
    select
        s.run_id,
        s.variant,
        s.scenario,
        greatest(coalesce(s.slo_looks, 1), 1) as slo_looks,
        1 - (1 - d.slo_confidence) / greatest(coalesce(s.slo_looks, 1), 1) as conf
    from perf_summary as s
    join decision as d on s.run_id = d.run_id
),

-- every measured request, its latencies as the SLO sees them (ms; +infinity: failed, or no figure)
requests as (
    select
        q.run_id,
        q.variant,
        q.scenario,
        coalesce(q.repeat, 0) as rep,
        q.request_index as idx,
        q.status = 'ok' as ok,
        q.start_s,
        coalesce(q.end_s, q.start_s + q.e2el_ms / 1000.0) as end_s,
        case when q.status <> 'ok' then 'infinity'::double
            else coalesce(case when coalesce(q.reasoning_tokens, 0) > 0 then q.ttft_answer_ms else q.ttft_ms end,
                          'infinity'::double)
        end as ttft,
        case when q.status <> 'ok' then 'infinity'::double else coalesce(q.tpot_ms, 0) end as tpot,
        case when q.status <> 'ok' then 'infinity'::double else coalesce(q.e2el_ms, 'infinity'::double) end as e2el
    from perf_requests as q
    where not q.is_warmup
),

sorted as (
    select
        run_id,
        variant,
        scenario,
        count(*) as n,
        count(*) filter (where not ok) as failed,
        list_sort(list(ttft)) as ttft_list,
        list_sort(list(tpot)) as tpot_list,
        list_sort(list(e2el)) as e2el_list
    from requests
    group by run_id, variant, scenario
),

-- correlated requests (tasks.core.percentiles.effective_requests): per limited latency, the autocorrelation at lag
-- k of its ranks (average ranks over the step, +infinity included; centred on the step's mean) summed over each
-- repeat's requests k apart in send order (k <= 64), over their sum of squares; Geyer's pair sums
-- g_j = rho_2j + rho_2j+1 (rho_0 = 1) are added while positive: deff = max(1, -1 + 2 sum g_j); n_eff =
-- floor(n / deff), within 1..n; the step counts the fewest over its limits, with the largest deff
metric_values as (
    select r.run_id, r.variant, r.scenario, r.rep, r.start_s, r.idx, 'ttft' as metric, r.ttft as v
    from requests as r join decision as d on r.run_id = d.run_id where d.slo_ttft_ms is not null
    union all
    select r.run_id, r.variant, r.scenario, r.rep, r.start_s, r.idx, 'tpot', r.tpot
    from requests as r join decision as d on r.run_id = d.run_id where d.slo_tpot_ms is not null
    union all
    select r.run_id, r.variant, r.scenario, r.rep, r.start_s, r.idx, 'e2el', r.e2el
    from requests as r join decision as d on r.run_id = d.run_id where d.slo_e2el_ms is not null
),

centred_ranks as (
    select
        *,
        rank() over (partition by run_id, variant, scenario, metric order by v)
            + (count(*) over (partition by run_id, variant, scenario, metric, v) - 1) / 2.0
            - (count(*) over (partition by run_id, variant, scenario, metric) + 1) / 2.0 as c
    from metric_values
),

positioned as (
    select *, row_number() over (partition by run_id, variant, scenario, metric, rep order by coalesce(start_s, 0), idx)
        as pos
    from centred_ranks
),

metric_den as (
    select run_id, variant, scenario, metric, count(*) as n, sum(c * c) as den, max(pos) as longest
    from positioned
    group by run_id, variant, scenario, metric
),

lag_sums as (
    select a.run_id, a.variant, a.scenario, a.metric, b.pos - a.pos as k, sum(a.c * b.c) as s
    from positioned as a
    join positioned as b
        on a.run_id = b.run_id and a.variant = b.variant and a.scenario = b.scenario and a.metric = b.metric
        and a.rep = b.rep and b.pos > a.pos and b.pos - a.pos <= 64
    group by a.run_id, a.variant, a.scenario, a.metric, b.pos - a.pos
),

pair_sums as (
    select
        m.run_id,
        m.variant,
        m.scenario,
        m.metric,
        p.j,
        (case when p.j = 0 then 1.0 else coalesce(l0.s, 0) / m.den end) + coalesce(l1.s, 0) / m.den as g
    from metric_den as m
    cross join range(0, 33) as p(j)
    left join lag_sums as l0
        on m.run_id = l0.run_id and m.variant = l0.variant and m.scenario = l0.scenario and m.metric = l0.metric
        and l0.k = 2 * p.j
    left join lag_sums as l1
        on m.run_id = l1.run_id and m.variant = l1.variant and m.scenario = l1.scenario and m.metric = l1.metric
        and l1.k = 2 * p.j + 1
    where m.n >= 3 and m.longest >= 2 and m.den > 0
),

metric_deff as (
    select run_id, variant, scenario, metric, greatest(1.0, -1 + 2 * sum(g) filter (where j < stop_j)) as deff
    from (
        select *, coalesce(min(j) filter (where g <= 0) over (partition by run_id, variant, scenario, metric), 33)
            as stop_j
        from pair_sums
    )
    group by run_id, variant, scenario, metric
),

step_eff as (
    select
        m.run_id,
        m.variant,
        m.scenario,
        min(case when d.deff is null then m.n
            else greatest(1, least(m.n, floor(m.n / d.deff + 1e-9)))::bigint end) as n_eff,
        max(d.deff) as deff
    from metric_den as m
    left join metric_deff as d
        on m.run_id = d.run_id and m.variant = d.variant and m.scenario = d.scenario and m.metric = d.metric
    group by m.run_id, m.variant, m.scenario
),

-- P(Binomial(n, q) = j) for j up to 10 standard deviations above the mean (beyond it the tail is < 1e-20), at the
-- requests the claim counts
combos as (
    select distinct coalesce(e.n_eff, s.n) as n, d.slo_percentile as pct, c.conf
    from sorted as s
    join decision as d on s.run_id = d.run_id
    join step_conf as c on s.run_id = c.run_id and s.variant = c.variant and s.scenario = c.scenario
    left join step_eff as e on s.run_id = e.run_id and s.variant = e.variant and s.scenario = e.scenario
    where d.slo_percentile < 100
),

terms as (
    select
        n,
        pct,
        conf,
        j,
        exp(lgamma(n + 1) - lgamma(j + 1) - lgamma(n - j + 1) + j * ln(1 - pct / 100) + (n - j) * ln(pct / 100)) as pmf
    from (
        select
            *,
            unnest(range(0, least(n, ceil(n * (1 - pct / 100) + 10 * sqrt(n * (1 - pct / 100) * pct / 100) + 10)::bigint) + 1))
                as j
        from combos
    )
),

cumulative as (
    select *, sum(pmf) over (partition by n, pct, conf order by j rows between unbounded preceding and current row) as cdf
    from terms
),

-- max_over_allowed, and the fewest over a limit that show the percentile above it (n + 1: no count does)
thresholds as (
    select
        n,
        pct,
        conf,
        coalesce(max(j) filter (where cdf <= 1 - conf + 1e-9), -1) as allowed,
        coalesce(min(j) filter (where j >= 1 and 1 - (cdf - pmf) <= 1 - conf + 1e-9), n + 1) as shown_above
    from cumulative
    group by n, pct, conf
),

-- over of n counts as ceil(over n_eff / n): in requests of n, the thresholds at n_eff are allowed n // n_eff and
-- (shown_above - 1) n // n_eff + 1 (tasks.decision.slo.counted_thresholds; the same as at n when n_eff = n)
counted as (
    select
        s.*,
        d.* exclude (run_id),
        c.conf as claim_conf,
        c.slo_looks,
        coalesce(e.n_eff, s.n) as n_eff,
        e.deff,
        -- the 100th percentile: nothing shows it within a limit, one request over shows it above
        coalesce(t.allowed, -1) as allowed_eff,
        coalesce(t.shown_above, 1) as shown_above_eff,
        case when d.slo_ttft_ms is not null then len(list_filter(s.ttft_list, lambda x: x > d.slo_ttft_ms)) end as ttft_over,
        case when d.slo_tpot_ms is not null then len(list_filter(s.tpot_list, lambda x: x > d.slo_tpot_ms)) end as tpot_over,
        case when d.slo_e2el_ms is not null then len(list_filter(s.e2el_list, lambda x: x > d.slo_e2el_ms)) end as e2el_over
    from sorted as s
    join decision as d on s.run_id = d.run_id
    join step_conf as c on s.run_id = c.run_id and s.variant = c.variant and s.scenario = c.scenario
    left join step_eff as e on s.run_id = e.run_id and s.variant = e.variant and s.scenario = e.scenario
    left join thresholds as t on coalesce(e.n_eff, s.n) = t.n and d.slo_percentile = t.pct and c.conf = t.conf
),

judged as (
    select
        *,
        case when allowed_eff >= 0 then allowed_eff * n // n_eff else -1 end as allowed,
        (shown_above_eff - 1) * n // n_eff + 1 as shown_above,
        (ttft_over * n_eff + n - 1) // n as ttft_counted,
        (tpot_over * n_eff + n - 1) // n as tpot_counted,
        (e2el_over * n_eff + n - 1) // n as e2el_counted
    from counted
),

-- the requests each undecided count needs: the fewest m with P(Binomial(m, q) <= over) <= 1 - c, over the count
-- as the claim counts it (scaled back by n / n_eff, rounded up, where requests are correlated)
undecided as (
    select distinct counted as over, pct, conf
    from (
        select ttft_over as o, ttft_counted as counted, allowed, shown_above, slo_percentile as pct, claim_conf as conf
        from judged
        union all
        select tpot_over, tpot_counted, allowed, shown_above, slo_percentile, claim_conf from judged
        union all
        select e2el_over, e2el_counted, allowed, shown_above, slo_percentile, claim_conf from judged
    )
    where o is not null and o > allowed and o < shown_above and pct < 100
),

needed as (
    select
        over,
        pct,
        conf,
        min(m) filter (where list_sum(list_transform(range(0, over + 1), lambda j: exp(
            lgamma(m + 1) - lgamma(j + 1) - lgamma(m - j + 1) + j * ln(1 - pct / 100) + (m - j) * ln(pct / 100))))
            <= 1 - conf + 1e-9) as n_needed
    from (
        select
            *,
            unnest(range(over + 1, over + 2 + ceil((over + 4 * sqrt(over) + 4) / (1 - pct / 100)
                                                    + ln(1 - conf) / ln(pct / 100))::bigint)) as m
        from undecided
    )
    group by over, pct, conf
),

-- rate steps: offered and achieved rates per repeat (slopes of arrival and ok-completion counts on time)
ranked as (
    select
        *,
        row_number() over (partition by run_id, variant, scenario, rep order by start_s) as arrival_rank,
        case when ok and end_s is not null then row_number() over (
            partition by run_id, variant, scenario, rep, ok and end_s is not null order by end_s) end as completion_rank
    from requests
),

repeat_rates as (
    select
        run_id,
        variant,
        scenario,
        rep,
        case when var_pop(start_s) > 0 then regr_slope(arrival_rank, start_s) end as offered,
        coalesce(case when var_pop(end_s) filter (where completion_rank is not null) > 0
                      then regr_slope(completion_rank, end_s) end, 0) as achieved
    from ranked
    group by run_id, variant, scenario, rep
),

step_rates as (
    select
        run_id,
        variant,
        scenario,
        avg(offered) as offered_req_s,
        avg(achieved) filter (where offered is not null) as achieved_req_s
    from repeat_rates
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
        s.load_kind,
        s.concurrency,
        s.load_kind = 'rate' and s.request_rate is not null and isfinite(s.request_rate) as is_rate_step,
        coalesce(s.load_kind = 'trace', false) as is_trace_step,
        coalesce(s.saturated, false) as saturated,
        s.stop_reason,
        s.send_error_ms_p99,
        s.request_rate,
        s.request_throughput,
        s.request_throughput_ci_low,
        s.request_throughput_ci_high,
        s.output_throughput,
        s.output_throughput_ci_low,
        s.output_throughput_ci_high,
        s.energy_j_per_token,
        s.energy_note,
        s.duration_s,
        coalesce(j.n, 0) as n,
        coalesce(j.failed, 0) as failed,
        d.* exclude (run_id),
        coalesce(j.allowed, -1) as allowed,
        j.shown_above,
        j.ttft_over,
        j.tpot_over,
        j.e2el_over,
        j.ttft_list,
        j.tpot_list,
        j.e2el_list,
        j.ttft_over >= j.shown_above as ttft_missed,
        j.tpot_over >= j.shown_above as tpot_missed,
        j.e2el_over >= j.shown_above as e2el_missed,
        j.ttft_over > j.allowed and j.ttft_over < j.shown_above as ttft_undecided,
        j.tpot_over > j.allowed and j.tpot_over < j.shown_above as tpot_undecided,
        j.e2el_over > j.allowed and j.e2el_over < j.shown_above as e2el_undecided,
        d.slo_ttft_ms is null and d.slo_tpot_ms is null and d.slo_e2el_ms is null as no_slo,
        r.offered_req_s,
        r.achieved_req_s,
        (greatest(nt.n_needed, np.n_needed, ne.n_needed) * j.n + j.n_eff - 1) // j.n_eff as needed_any,
        j.n_eff,
        j.deff,
        coalesce(j.claim_conf, d.slo_confidence) as claim_confidence,
        coalesce(j.slo_looks, 1) as slo_looks,
        s.repeats_added,
        s.extend_note
    from perf_summary as s
    join decision as d on s.run_id = d.run_id
    left join judged as j on s.run_id = j.run_id and s.variant = j.variant and s.scenario = j.scenario
    left join step_rates as r on s.run_id = r.run_id and s.variant = r.variant and s.scenario = r.scenario
    left join needed as nt
        on nt.over = j.ttft_counted and j.ttft_over > j.allowed and j.ttft_over < j.shown_above
        and nt.pct = d.slo_percentile and nt.conf = j.claim_conf
    left join needed as np
        on np.over = j.tpot_counted and j.tpot_over > j.allowed and j.tpot_over < j.shown_above
        and np.pct = d.slo_percentile and np.conf = j.claim_conf
    left join needed as ne
        on ne.over = j.e2el_counted and j.e2el_over > j.allowed and j.e2el_over < j.shown_above
        and ne.pct = d.slo_percentile and ne.conf = j.claim_conf
),

statused as (
    select
        *,
        case when is_rate_step or is_trace_step then not saturated and offered_req_s is not null
            and achieved_req_s >= min_rate_ratio * offered_req_s end as sustained,
        case
            when no_slo then null
            when n = 0 then 'no_requests'
            when coalesce(ttft_missed or tpot_missed or e2el_missed, false) then 'missed'
            when (is_rate_step or is_trace_step) and (saturated or not coalesce(
                offered_req_s is not null and achieved_req_s >= min_rate_ratio * offered_req_s, false)) then 'not_sustained'
            when coalesce(ttft_undecided or tpot_undecided or e2el_undecided, false) then 'not_enough_requests'
            else 'met'
        end as slo_status,
        -- numpy's linear percentile: position h = (n - 1) * p / 100 between the sorted values i and i + 1 (1-based)
        (n - 1) * slo_percentile / 100.0 as h
    from checked
),

final as (
    select
        run_id,
        variant,
        scenario,
        load_kind,
        concurrency,
        is_rate_step,
        request_rate,
        request_throughput,
        request_throughput_ci_low,
        request_throughput_ci_high,
        case when is_rate_step then request_rate when is_trace_step then offered_req_s else request_throughput end
            as load_req_s,
        output_throughput as output_tok_s,
        output_throughput_ci_low as output_tok_s_ci_low,
        output_throughput_ci_high as output_tok_s_ci_high,
        energy_j_per_token,
        energy_note,
        n as num_measured,
        failed as num_misses,
        slo_percentile,
        slo_confidence,
        allowed as max_over_allowed,
        ttft_over,
        tpot_over,
        e2el_over,
        -- the point estimates (numpy's linear percentile); NULL on a failed request
        case when n > 0 then nullif(
            case when h = floor(h) or ttft_list[floor(h)::int + 1] = ttft_list[floor(h)::int + 2] then ttft_list[floor(h)::int + 1]
                 else ttft_list[floor(h)::int + 1] + (h - floor(h)) * (ttft_list[floor(h)::int + 2] - ttft_list[floor(h)::int + 1])
            end, 'infinity'::double) end as ttft_ms_pctl,
        case when n > 0 then nullif(
            case when h = floor(h) or tpot_list[floor(h)::int + 1] = tpot_list[floor(h)::int + 2] then tpot_list[floor(h)::int + 1]
                 else tpot_list[floor(h)::int + 1] + (h - floor(h)) * (tpot_list[floor(h)::int + 2] - tpot_list[floor(h)::int + 1])
            end, 'infinity'::double) end as tpot_ms_pctl,
        case when n > 0 then nullif(
            case when h = floor(h) or e2el_list[floor(h)::int + 1] = e2el_list[floor(h)::int + 2] then e2el_list[floor(h)::int + 1]
                 else e2el_list[floor(h)::int + 1] + (h - floor(h)) * (e2el_list[floor(h)::int + 2] - e2el_list[floor(h)::int + 1])
            end, 'infinity'::double) end as e2el_ms_pctl,
        -- the upper confidence bounds: the order statistic X_(n - allowed)
        case when allowed >= 0 then nullif(ttft_list[n - allowed], 'infinity'::double) end as ttft_ms_bound,
        case when allowed >= 0 then nullif(tpot_list[n - allowed], 'infinity'::double) end as tpot_ms_bound,
        case when allowed >= 0 then nullif(e2el_list[n - allowed], 'infinity'::double) end as e2el_ms_bound,
        slo_ttft_ms,
        slo_tpot_ms,
        slo_e2el_ms,
        case when is_rate_step or is_trace_step then offered_req_s end as offered_req_s,
        case when is_rate_step or is_trace_step then achieved_req_s end as achieved_req_s,
        case when is_rate_step or is_trace_step then achieved_req_s / offered_req_s end as achieved_ratio,
        sustained,
        slo_status,
        slo_status = 'met' as slo_met,
        case when slo_status = 'not_enough_requests' then needed_any end as n_needed,
        case
            when no_slo then 'no SLO: set decision.slo'
            when n = 0 then 'no measured request'
            when slo_status <> 'met' then concat_ws('; ',
                case when failed > 0 then failed || ' of ' || n || ' requests failed or did not complete' end,
                case when ttft_missed then printf('p%g TTFT > %g ms (%d of %d over)', slo_percentile, slo_ttft_ms, ttft_over, n) end,
                case when tpot_missed then printf('p%g TPOT > %g ms (%d of %d over)', slo_percentile, slo_tpot_ms, tpot_over, n) end,
                case when e2el_missed then printf('p%g E2EL > %g ms (%d of %d over)', slo_percentile, slo_e2el_ms, e2el_over, n) end,
                case when ttft_undecided then printf('p%g TTFT <= %g ms not shown at %g %% (%d of %d over, %d allowed)',
                    slo_percentile, slo_ttft_ms, claim_confidence * 100, ttft_over, n, greatest(allowed, 0)) end,
                case when tpot_undecided then printf('p%g TPOT <= %g ms not shown at %g %% (%d of %d over, %d allowed)',
                    slo_percentile, slo_tpot_ms, claim_confidence * 100, tpot_over, n, greatest(allowed, 0)) end,
                case when e2el_undecided then printf('p%g E2EL <= %g ms not shown at %g %% (%d of %d over, %d allowed)',
                    slo_percentile, slo_e2el_ms, claim_confidence * 100, e2el_over, n, greatest(allowed, 0)) end,
                case when n_eff < n and (coalesce(ttft_missed or ttft_undecided, false)
                    or coalesce(tpot_missed or tpot_undecided, false) or coalesce(e2el_missed or e2el_undecided, false)) then
                    printf('requests correlated (design effect %.2f): counted as %d of %d', deff, n_eff, n) end,
                case when saturated then 'saturated: ' || coalesce(stop_reason, 'stopped early') end,
                case when (is_rate_step or is_trace_step) and not saturated and not coalesce(sustained, false) then
                    case when offered_req_s is null then 'not sustained: no arrival rate (under 2 requests)'
                         else printf('not sustained: achieved %.0f %% of the offered rate', achieved_req_s / offered_req_s * 100)
                    end
                end,
                case when needed_any is not null then needed_any || ' requests needed' end)
        end as slo_fail_reason,
        g.num_good / nullif(duration_s, 0) as goodput_req_s,
        duration_s,
        is_trace_step,
        case when n > 0 then 100.0 * g.num_good / n end as slo_attainment_pct,
        saturated,
        stop_reason,
        send_error_ms_p99,
        n_eff as n_effective,
        deff as requests_deff,
        slo_looks,
        claim_confidence,
        repeats_added,
        extend_note
    from statused
    left join good as g using (run_id, variant, scenario)
)

select * from final
