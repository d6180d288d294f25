-- v_recommendation: the decision, one row per (run_id, variant) of `variants`: which variant to ship under
-- the run's SLO and quality gate (v_decision), at what load, and what it costs. `tradeoff recommend` prints
-- these rows in words (tasks/report/recommend.py). Columns:
--   run_id, variant, engine, quantization, speculative, is_reference, status
--   slo_label, slo_percentile, slo_ttft_ms, slo_tpot_ms, slo_e2el_ms   the SLO (v_decision)
--   slo_confidence                 confidence of each percentile claim (v_decision)
--   steps_measured, steps_meeting_slo
--   load_basis                     trace: the run's only steps replay a request trace (perf.trace): the variant
--                                  serves the team's own traffic within the SLO or not (the same rules as a rate
--                                  step), ranked on that traffic by goodput;
--                                  rate: the run has rate steps (Poisson arrivals), and only they give the
--                                  sustainable load, ranked by offered rate (MLPerf's server scenario);
--                                  concurrency: neither, so closed-loop steps do, ranked by concurrency.
--                                  A run that replayed a trace beside rate or closed-loop steps ranks by those
--                                  (the load a variant sustains beyond the trace: every variant that serves a
--                                  trace has the same goodput on it, its offered rate), and a variant ships only
--                                  when it serves the trace within the SLO too (trace_required)
--   trace_required                 the run replayed a trace beside other steps: its step must meet the SLO
--   sustainable_scenario           the highest step of that basis that meets the SLO (v_slo_steps: shown within
--                                  every limit, and sustained) with every lower step meeting it too; NULL: none
--   sustainable_concurrency        its concurrency (requests in flight; a rate step's cap, or its request count)
--   sustainable_request_rate       requests/s it offered (rate steps; NULL for closed-loop steps)
--   sustainable_req_s              requests/s: the step's load (a rate step's offered rate; closed-loop steps:
--                                  completed requests/s)
--   sustainable_req_s_ci_low/_high the load's interval: a rate step's bracket [its rate, the next failing rate)
--                                  (upper NULL: none failed), a closed-loop step's log-scale t interval over repeats
--   sustainable_goodput_req_s      requests/s that met every limit in that step
--   sustainable_output_tok_s       output tokens/s in that step; _ci_low/_ci_high its interval (>= 2 repeats)
--   sustainable_ttft_ms_pctl, sustainable_tpot_ms_pctl   ms, TTFT and TPOT at the SLO percentile there (point)
--   sustainable_ttft_ms_bound, sustainable_tpot_ms_bound, sustainable_e2el_ms_bound   ms, their upper
--                                  confidence bounds (what the claim rests on)
--   sustainable_n, sustainable_over  the step's measured requests and the most of them over any one limit
--   sustainable_confidence         the confidence its claim was judged at (v_slo_steps.claim_confidence: below
--                                  slo_confidence's share of error when its looks were corrected, decision.extend)
--   sustainable_achieved_ratio     rate steps: achieved / offered rate there
--   sustainable_is_lower_bound     the highest step measured still meets the SLO: the limit lies higher
--   next_failing_scenario, next_failing_req_s, next_failing_status   the first step of the basis (by load) that
--                                  does not meet the SLO: missed, not_sustained or not_enough_requests
--   slo_status                     the lowest step's status when no step meets the SLO (misses_slo vs
--                                  not_enough_requests); n_needed_slo: requests it would need
--   slo_note                       why there is no sustainable load (the lowest step's reason), or a caveat
--   gate                           pass | fail | not_enough_evidence (v_quality_gate, over every gating metric)
--   gate_metric                    the metric that decides the gate: the failing one, the undecided one that
--                                  needs the most samples, or the tightest passing one
--   retention, retention_ci_low, retention_ci_high, retention_target, n, n_needed, gate_reason   of that metric
--   gate_basis, margin_points, delta, delta_ci_low, delta_ci_high, gate_confidence, looks, looks_planned,
--   n_lost, n_gained, n_needed_if_equal, identity_n, identity_same, identity_flip_high, identity_retention_low,
--   identity_n_needed              of that metric too (v_quality_gate): what the gate's words rest on
--   gate_detail                    every gating metric: 'metric: gate (reason)'
--   usd_per_1m_output_tok          USD per 1M output tokens at the sustainable load (own hardware: usd_per_hour
--                                  over its tokens/s; hosted: the output price); cost_note why NULL
--   j_per_1m_output_tok            J per 1M output tokens at the sustainable load (measured J/token x 1e6)
--   gco2e_per_1m_output_tok        gCO2e per 1M output tokens = J / 3.6e6 x decision.grid_gco2e_per_kwh
--   energy_note, carbon_note       why energy or carbon is NULL
--   efficiency_metric              the first gating metric, when it is an accuracy (fraction)
--   output_tok_per_correct         output tokens per correct answer: mean output tokens per sample / accuracy
--   s_per_correct                  s of serving time per correct answer at the sustainable output tokens/s
--   usd_per_correct                USD per correct answer at that load (or at the hosted token prices)
--   efficiency_note                why (some of) the three above are NULL
--   optimise                       rate | tps | cost | energy | cost_per_correct (v_decision)
--   objective                      the variant's value of it (req/s, tok/s, USD/1M tok, J/1M tok, USD)
--   objective_ci_low, _ci_high     the objective's interval where it has one (rate, tps and own-hardware cost:
--                                  from the load's interval; NULL otherwise)
--   rank                           1 = recommended, among variants that meet the SLO and pass the gate
--   paired_ratio, _ci_low, _ci_high  the objective over the best's (the eligible variant with the best objective),
--                                  paired round by round (perf_pairs, warehouse/pairs.py: closed-loop steps; a rate,
--                                  tokens/s or own-hardware cost), and its interval at the steps' level; NULL on the
--                                  best's own row and where the run has no pair (rate steps, a trace, one repeat)
--   paired_rounds                  the rounds that ratio rests on
--   tied_with                      variants tied with the best: the interval of their paired ratio takes in 1 or
--                                  lies within tie_tolerance_pct, or,
--                                  where the run has none, their objective intervals overlap the best's, or,
--                                  where either has none, their objectives are within tie_tolerance_pct of it
--   verdict                        recommended | passes | not_ranked (no objective value) | fails_gate |
--                                  not_enough_evidence | not_enough_requests (no step has the requests to show
--                                  the SLO percentile) | misses_slo | failed
--   verdict_reason                 why, in words
--   beats_recommended              better on the objective than the recommended variant (e.g. faster)
--   recommended_variant            the run's recommendation (same on every row); NULL: none
--   decision_note                  why there is none
--   trace_slo_status, trace_slo_attainment_pct, trace_goodput_req_s, trace_offered_req_s, trace_n,
--   trace_send_error_ms_p99, trace_fail_reason   the replayed trace's step (v_slo_steps), met or not; NULL: no trace.
--                                  trace_offered_req_s is its requests over the step's span (goodput's denominator:
--                                  goodput <= it), not the arrival slope of v_slo_steps, which a burst skews

with decision as (
    select * from v_decision
),

steps as (
    select * from v_slo_steps
),

-- the replayed trace's step, met or not (one per variant: its repeats are pooled)
trace_step as (
    select
        run_id,
        variant,
        slo_status as trace_slo_status,
        slo_attainment_pct as trace_slo_attainment_pct,
        goodput_req_s as trace_goodput_req_s,
        num_measured / nullif(duration_s, 0) as trace_offered_req_s,
        num_measured as trace_n,
        send_error_ms_p99 as trace_send_error_ms_p99,
        slo_fail_reason as trace_fail_reason
    from steps
    where is_trace_step
),

step_counts as (
    select run_id, variant, count(*) as steps_measured, count(*) filter (where slo_met) as steps_meeting_slo
    from steps
    group by run_id, variant
),

-- the steps a sustainable load comes from: the rate steps when the run has any, else the closed-loop steps
-- (never the fixed-length `jitter` instrument), else a replayed trace's, in load order
basis as (
    select
        run_id,
        case
            when bool_or(is_rate_step) then 'rate'
            when bool_or(not is_trace_step and scenario <> 'jitter') or not bool_or(is_trace_step) then 'concurrency'
            else 'trace'
        end as load_basis,
        bool_or(is_trace_step) and bool_or(not is_trace_step and scenario <> 'jitter') as trace_required
    from steps
    group by run_id
),

ordered as (
    select
        s.*,
        b.load_basis,
        row_number() over (
            partition by s.run_id, s.variant
            order by case when b.load_basis = 'rate' then s.request_rate else s.concurrency end nulls last, s.scenario
        ) as load_order
    from steps as s
    join basis as b on s.run_id = b.run_id
    where case b.load_basis
            when 'trace' then s.is_trace_step
            when 'rate' then s.is_rate_step
            else not s.is_rate_step and not s.is_trace_step
        end
        and s.scenario <> 'jitter'
),

chained as (
    select
        *,
        bool_and(coalesce(slo_met, false)) over (
            partition by run_id, variant order by load_order rows between unbounded preceding and current row
        ) as all_met_so_far
    from ordered
),

best as (
    select *
    from chained
    where all_met_so_far
    qualify row_number() over (partition by run_id, variant order by load_order desc) = 1
),

next_failing as (
    select *
    from chained
    where not coalesce(slo_met, false)
    qualify row_number() over (partition by run_id, variant order by load_order) = 1
),

lowest as (
    select *
    from chained
    where load_order = 1
),

gates as (
    select
        *,
        row_number() over (
            partition by run_id, variant
            order by case gate when 'fail' then 0 when 'not_enough_evidence' then 1 else 2 end,
                case when gate = 'fail' then retention_ci_high end nulls last,
                case when gate = 'not_enough_evidence' then coalesce(n_needed, 9e18) end desc,
                case when gate = 'pass' then retention_ci_low end nulls last,
                gate_metric
        ) as binding_order
    from v_quality_gate
),

gate_summary as (
    select
        run_id,
        variant,
        case
            when bool_or(gate = 'fail') then 'fail'
            when bool_or(gate = 'not_enough_evidence') then 'not_enough_evidence'
            else 'pass'
        end as gate,
        string_agg(gate_metric || ': ' || gate || ' (' || gate_reason || ')', '; ' order by gate_metric) as gate_detail
    from gates
    group by run_id, variant
),

binding as (
    select * from gates where binding_order = 1
),

efficiency_tokens as (
    select
        s.run_id,
        s.variant,
        avg(try_cast(json_extract(s.details, '$.output_tokens') as double)) as output_tokens,
        avg(try_cast(json_extract(s.details, '$.prompt_tokens') as double)) as prompt_tokens
    from quality_samples as s
    join decision as d on s.run_id = d.run_id and s.suite = split_part(d.gate_metrics[1], '.', 1)
    group by s.run_id, s.variant
),

efficiency_score as (
    select sc.run_id, sc.variant, sc.value as accuracy, sc.unit
    from quality_scores as sc
    join decision as d on sc.run_id = d.run_id and sc.suite || '.' || sc.metric = d.gate_metrics[1]
),

assembled as (
    select
        v.run_id,
        v.variant,
        v.engine,
        v.quantization,
        v.speculative,
        v.is_reference,
        v.status,
        v.error,
        d.slo_label,
        d.slo_percentile,
        d.slo_confidence,
        d.slo_ttft_ms,
        d.slo_tpot_ms,
        d.slo_e2el_ms,
        coalesce(c.steps_measured, 0) as steps_measured,
        coalesce(c.steps_meeting_slo, 0) as steps_meeting_slo,
        l.load_basis,
        coalesce(bs.trace_required, false) as trace_required,
        t.trace_slo_status,
        t.trace_slo_attainment_pct,
        t.trace_goodput_req_s,
        t.trace_offered_req_s,
        t.trace_n,
        t.trace_send_error_ms_p99,
        t.trace_fail_reason,
        b.scenario as sustainable_scenario,
        b.concurrency as sustainable_concurrency,
        b.request_rate as sustainable_request_rate,
        b.load_req_s as sustainable_req_s,
        case when b.is_rate_step then b.load_req_s else b.request_throughput_ci_low end as sustainable_req_s_ci_low,
        case when b.is_rate_step then nf.request_rate else b.request_throughput_ci_high end as sustainable_req_s_ci_high,
        b.goodput_req_s as sustainable_goodput_req_s,
        b.output_tok_s as sustainable_output_tok_s,
        b.output_tok_s_ci_low as sustainable_output_tok_s_ci_low,
        b.output_tok_s_ci_high as sustainable_output_tok_s_ci_high,
        b.ttft_ms_pctl as sustainable_ttft_ms_pctl,
        b.tpot_ms_pctl as sustainable_tpot_ms_pctl,
        b.ttft_ms_bound as sustainable_ttft_ms_bound,
        b.tpot_ms_bound as sustainable_tpot_ms_bound,
        b.e2el_ms_bound as sustainable_e2el_ms_bound,
        b.num_measured as sustainable_n,
        greatest(b.ttft_over, b.tpot_over, b.e2el_over) as sustainable_over,
        b.claim_confidence as sustainable_confidence,
        b.achieved_ratio as sustainable_achieved_ratio,
        case when b.scenario is not null then nf.scenario is null end as sustainable_is_lower_bound,
        nf.scenario as next_failing_scenario,
        case when nf.is_rate_step then nf.request_rate else nf.load_req_s end as next_failing_req_s,
        nf.slo_status as next_failing_status,
        case when b.scenario is null then l.slo_status end as slo_status,
        case when b.scenario is null then l.n_needed end as n_needed_slo,
        case
            when v.status <> 'ok' then 'variant failed'
            when c.steps_measured is null then 'no perf step measured'
            when b.scenario is null and l.slo_status = 'not_enough_requests'
                then 'the lowest step (' || l.scenario || ') has too few requests to show the SLO: ' || l.slo_fail_reason
            when b.scenario is null then 'the lowest step (' || l.scenario || ') does not meet the SLO: ' || l.slo_fail_reason
            when nf.scenario is null then 'the highest step measured (' || b.scenario || ') meets the SLO: the limit lies higher'
            when nf.slo_status = 'not_enough_requests'
                then 'the next step (' || nf.scenario || ') has too few requests to show the SLO: ' || nf.slo_fail_reason
        end as slo_note,
        case
            when v.status <> 'ok' then null
            when g.gate is null and len(d.gate_metrics) = 0 then 'pass'
            else coalesce(g.gate, 'not_enough_evidence')
        end as gate,
        bg.gate_metric,
        bg.retention,
        bg.retention_ci_low,
        bg.retention_ci_high,
        d.retention_target,
        bg.n,
        bg.n_needed,
        bg.gate_basis,
        d.margin_points,
        bg.delta,
        bg.ci_low as delta_ci_low,
        bg.ci_high as delta_ci_high,
        bg.confidence as gate_confidence,
        bg.looks,
        bg.looks_planned,
        bg.n_lost,
        bg.n_gained,
        bg.n_needed_if_equal,
        bg.identity_n,
        bg.identity_same,
        bg.identity_flip_high,
        bg.identity_retention_low,
        bg.identity_n_needed,
        case
            when len(d.gate_metrics) = 0 then 'no gating metric: set decision.gate_metrics or quality.primary'
            else g.gate_detail
        end as gate_detail,
        bg.gate_reason,
        coalesce(v.usd_per_1m_output_tok, v.usd_per_hour / nullif(b.output_tok_s * 3600, 0) * 1e6) as usd_per_1m_output_tok,
        case
            when v.usd_per_1m_output_tok is null and v.usd_per_hour is null then 'no price in the config (cost:)'
            when v.usd_per_1m_output_tok is null and b.scenario is null then 'no sustainable load'
        end as cost_note,
        b.energy_j_per_token * 1e6 as j_per_1m_output_tok,
        b.energy_j_per_token * 1e6 / 3.6e6 * d.grid_gco2e_per_kwh as gco2e_per_1m_output_tok,
        case
            when b.scenario is null then 'no sustainable load'
            when b.energy_j_per_token is null then coalesce(b.energy_note, 'not measured')
        end as energy_note,
        case
            when b.scenario is null and l.energy_j_per_token is null and l.energy_note is not null
                then 'no sustainable load; energy not measured either: ' || l.energy_note
            when b.scenario is null then 'no sustainable load'
            when b.energy_j_per_token is null then 'energy not measured: ' || coalesce(b.energy_note, 'no reason recorded')
            when d.grid_gco2e_per_kwh is null then 'no grid intensity: set decision.grid_gco2e_per_kwh'
        end as carbon_note,
        case when es.unit = 'fraction' then d.gate_metrics[1] end as efficiency_metric,
        case when es.unit = 'fraction' and es.accuracy > 0 then et.output_tokens / es.accuracy end as output_tok_per_correct,
        case when es.unit = 'fraction' and es.accuracy > 0 then et.output_tokens / es.accuracy / nullif(b.output_tok_s, 0) end
            as s_per_correct,
        case
            when es.unit <> 'fraction' or not es.accuracy > 0 then null
            when v.usd_per_1m_output_tok is not null
                then (coalesce(v.usd_per_1m_input_tok, 0) * et.prompt_tokens + v.usd_per_1m_output_tok * et.output_tokens) / 1e6 / es.accuracy
            else v.usd_per_hour / 3600 * et.output_tokens / es.accuracy / nullif(b.output_tok_s, 0)
        end as usd_per_correct,
        case
            when len(d.gate_metrics) = 0 then 'no gating metric'
            when es.unit is null then 'no score of ' || d.gate_metrics[1]
            when es.unit <> 'fraction' then d.gate_metrics[1] || ' is not an accuracy'
            when not es.accuracy > 0 then 'no correct answer'
            when et.output_tokens is null then 'the suite records no token counts per sample'
            when b.scenario is null then 'no sustainable load: no seconds or USD per correct answer'
        end as efficiency_note,
        d.optimise,
        d.tie_tolerance_pct,
        -- the load's interval as a factor of it, for the objectives' intervals: a rate step's bracket (infinity:
        -- no failing rate above), a closed-loop step's interval of its output tokens/s
        case when b.is_rate_step then coalesce(nf.request_rate / b.load_req_s, 'infinity'::double)
             else b.output_tok_s_ci_high / nullif(b.output_tok_s, 0) end as load_ci_high_factor,
        case when b.is_rate_step then 1.0 else b.output_tok_s_ci_low / nullif(b.output_tok_s, 0) end as load_ci_low_factor,
        v.usd_per_1m_output_tok is not null as priced_per_token
    from variants as v
    join decision as d on v.run_id = d.run_id
    left join step_counts as c on v.run_id = c.run_id and v.variant = c.variant
    left join best as b on v.run_id = b.run_id and v.variant = b.variant
    left join next_failing as nf on v.run_id = nf.run_id and v.variant = nf.variant
    left join lowest as l on v.run_id = l.run_id and v.variant = l.variant
    left join basis as bs on v.run_id = bs.run_id
    left join trace_step as t on v.run_id = t.run_id and v.variant = t.variant
    left join gate_summary as g on v.run_id = g.run_id and v.variant = g.variant
    left join binding as bg on v.run_id = bg.run_id and v.variant = bg.variant
    left join efficiency_tokens as et on v.run_id = et.run_id and v.variant = et.variant
    left join efficiency_score as es on v.run_id = es.run_id and v.variant = es.variant
),

objectives as (
    select
        *,
        case optimise
            when 'rate' then case when load_basis = 'trace' then sustainable_goodput_req_s else sustainable_req_s end
            when 'tps' then sustainable_output_tok_s
            when 'cost' then usd_per_1m_output_tok
            when 'energy' then j_per_1m_output_tok
            when 'cost_per_correct' then usd_per_correct
        end as objective,
        -- the objective's interval: rate from the load's (a closed-loop step's own log-scale t interval of its req/s), tokens/s
        -- and own-hardware cost scaled by the same factors; none for energy, per-token prices and per-correct cost
        case optimise
            when 'rate' then case load_basis when 'trace' then null when 'rate' then sustainable_req_s
                                  else sustainable_req_s_ci_low end
            when 'tps' then sustainable_output_tok_s * load_ci_low_factor
            when 'cost' then case when priced_per_token then usd_per_1m_output_tok
                                  else usd_per_1m_output_tok / load_ci_high_factor end
        end as objective_low,
        case optimise
            when 'rate' then case load_basis when 'trace' then null when 'rate' then sustainable_req_s * load_ci_high_factor
                                  else sustainable_req_s_ci_high end
            when 'tps' then sustainable_output_tok_s * load_ci_high_factor
            when 'cost' then case when priced_per_token then usd_per_1m_output_tok
                                  else usd_per_1m_output_tok / load_ci_low_factor end
        end as objective_high,
        optimise in ('rate', 'tps') as higher_is_better,
        status = 'ok' and sustainable_scenario is not null and gate = 'pass' and not trace_unserved as eligible
    from (select *, trace_required and coalesce(trace_slo_status, '') <> 'met' as trace_unserved from assembled)
),

signed as (
    select
        *,
        case when higher_is_better then objective else -objective end as score,
        case when higher_is_better then objective_low else -objective_high end as score_low,
        case when higher_is_better then objective_high else -objective_low end as score_high,
        max(case when higher_is_better then objective else -objective end)
            filter (where eligible and objective is not null) over (partition by run_id) as best_score
    from objectives
),

best_interval as (
    select
        *,
        arg_max(score_low, score) filter (where eligible and objective is not null) over (partition by run_id) as best_low,
        arg_max(score_high, score) filter (where eligible and objective is not null) over (partition by run_id) as best_high,
        arg_max(variant, score) filter (where eligible and objective is not null) over (partition by run_id) as best_variant,
        arg_max(sustainable_scenario, score) filter (where eligible and objective is not null) over (partition by run_id)
            as best_scenario,
        -- own-hardware cost is price / tokens/s: the best's price, to turn a ratio of tokens/s into one of cost
        arg_max(usd_per_1m_output_tok * sustainable_output_tok_s, score) filter (where eligible and objective is not null)
            over (partition by run_id) as best_price
    from signed
),

-- the objective of each variant over the best's, paired round by round (perf_pairs: closed-loop steps only; own-
-- hardware cost from the inverse ratio of tokens/s times the ratio of prices)
paired as (
    select
        bi.*,
        p.n_pairs as paired_rounds,
        case when bi.load_basis <> 'concurrency' then null
             when bi.optimise = 'rate' then {r: p.request_throughput_ratio, lo: p.request_throughput_ratio_ci_low,
                                            hi: p.request_throughput_ratio_ci_high}
             when bi.optimise = 'tps' then {r: p.output_throughput_ratio, lo: p.output_throughput_ratio_ci_low,
                                           hi: p.output_throughput_ratio_ci_high}
             when bi.optimise = 'cost' and not bi.priced_per_token then {
                 r: bi.usd_per_1m_output_tok * bi.sustainable_output_tok_s / bi.best_price / p.output_throughput_ratio,
                 lo: bi.usd_per_1m_output_tok * bi.sustainable_output_tok_s / bi.best_price / p.output_throughput_ratio_ci_high,
                 hi: bi.usd_per_1m_output_tok * bi.sustainable_output_tok_s / bi.best_price / p.output_throughput_ratio_ci_low}
        end as pair
    from best_interval as bi
    left join perf_pairs as p
      on p.run_id = bi.run_id and p.variant = bi.variant and p.scenario = bi.sustainable_scenario
     and p.other_variant = bi.best_variant and p.other_scenario = bi.best_scenario
),

paired_ratios as (
    select * exclude (pair), pair.r as paired_ratio, pair.lo as paired_ratio_ci_low, pair.hi as paired_ratio_ci_high
    from paired
),

-- a tie with the best: the interval of their objectives' ratio, paired round by round, takes in 1 (more than
-- touches it), or lies within +-tie_tolerance_pct (a lead shown, but smaller than a finding); where the run has no such interval, the two objective intervals overlap (more than touch: a rate
-- bracket ends at a rate that failed); where either has none, the objectives are within tie_tolerance_pct
tied as (
    select
        *,
        case
            when paired_ratio_ci_low is not null and paired_ratio_ci_high is not null then 'pairs'
            when score_low is not null and score_high is not null and best_low is not null and best_high is not null
                then 'intervals'
            else 'tolerance'
        end as tie_basis,
        eligible and objective is not null and (score = best_score or case
            when paired_ratio_ci_low is not null and paired_ratio_ci_high is not null
                then (paired_ratio_ci_low < 1 and paired_ratio_ci_high > 1)
                     or (paired_ratio_ci_low >= 1 / (1 + tie_tolerance_pct / 100)
                         and paired_ratio_ci_high <= 1 + tie_tolerance_pct / 100)
            when score_low is not null and score_high is not null and best_low is not null and best_high is not null
                then score_high > best_low and score_low < best_high
            else abs(score - best_score) <= tie_tolerance_pct / 100 * abs(best_score)
        end) as in_tie
    from paired_ratios
),

ranked as (
    select
        *,
        case when eligible and objective is not null then row_number() over (
            partition by run_id, eligible and objective is not null
            order by in_tie desc, case when in_tie then retention_ci_low end desc nulls last,
                case when in_tie then is_reference end desc, score desc, variant
        ) end as rank,
        list(variant order by variant) filter (where in_tie) over (partition by run_id) as tie_set,
        -- how the tie was read: the best's own row says nothing (it is the best), the others' say how they tie it
        case
            when coalesce(bool_or(tie_basis = 'tolerance') filter (where in_tie and variant <> best_variant)
                          over (partition by run_id), true) then 'tolerance'
            when bool_and(tie_basis = 'pairs') filter (where in_tie and variant <> best_variant)
                 over (partition by run_id) then 'pairs'
            else 'intervals'
        end as tie_set_basis
    from tied
),

chosen as (
    select
        *,
        max(case when rank = 1 then variant end) over (partition by run_id) as recommended_variant,
        max(case when rank = 1 then score end) over (partition by run_id) as recommended_score,
        max(case when rank = 1 then objective end) over (partition by run_id) as recommended_objective,
        bool_or(status = 'ok') over (partition by run_id) as any_ok,
        bool_or(status = 'ok' and sustainable_scenario is not null) over (partition by run_id) as any_slo,
        bool_or(status = 'ok' and sustainable_scenario is not null and not trace_unserved) over (partition by run_id)
            as any_slo_and_trace,
        bool_or(status = 'ok' and sustainable_scenario is null and slo_status = 'not_enough_requests')
            over (partition by run_id) as any_too_few,
        bool_or(eligible) over (partition by run_id) as any_eligible
    from ranked
),

final as (
    select
        run_id,
        variant,
        engine,
        quantization,
        speculative,
        is_reference,
        status,
        slo_label,
        slo_percentile,
        slo_confidence,
        slo_ttft_ms,
        slo_tpot_ms,
        slo_e2el_ms,
        steps_measured,
        steps_meeting_slo,
        load_basis,
        trace_required,
        sustainable_scenario,
        sustainable_concurrency,
        sustainable_request_rate,
        sustainable_req_s,
        sustainable_req_s_ci_low,
        sustainable_req_s_ci_high,
        sustainable_goodput_req_s,
        sustainable_output_tok_s,
        sustainable_output_tok_s_ci_low,
        sustainable_output_tok_s_ci_high,
        sustainable_ttft_ms_pctl,
        sustainable_tpot_ms_pctl,
        sustainable_ttft_ms_bound,
        sustainable_tpot_ms_bound,
        sustainable_e2el_ms_bound,
        sustainable_n,
        sustainable_over,
        sustainable_confidence,
        sustainable_achieved_ratio,
        sustainable_is_lower_bound,
        next_failing_scenario,
        next_failing_req_s,
        next_failing_status,
        slo_status,
        n_needed_slo,
        slo_note,
        gate,
        gate_metric,
        retention,
        retention_ci_low,
        retention_ci_high,
        retention_target,
        n,
        n_needed,
        gate_reason,
        gate_basis,
        margin_points,
        delta,
        delta_ci_low,
        delta_ci_high,
        gate_confidence,
        looks,
        looks_planned,
        n_lost,
        n_gained,
        n_needed_if_equal,
        identity_n,
        identity_same,
        identity_flip_high,
        identity_retention_low,
        identity_n_needed,
        gate_detail,
        usd_per_1m_output_tok,
        cost_note,
        j_per_1m_output_tok,
        gco2e_per_1m_output_tok,
        energy_note,
        carbon_note,
        efficiency_metric,
        output_tok_per_correct,
        s_per_correct,
        usd_per_correct,
        efficiency_note,
        optimise,
        objective,
        nullif(objective_low, 'infinity'::double) as objective_ci_low,
        nullif(objective_high, 'infinity'::double) as objective_ci_high,
        rank,
        case when variant <> best_variant then paired_ratio end as paired_ratio,
        case when variant <> best_variant then paired_ratio_ci_low end as paired_ratio_ci_low,
        case when variant <> best_variant then paired_ratio_ci_high end as paired_ratio_ci_high,
        case when variant <> best_variant and paired_ratio is not null then paired_rounds end as paired_rounds,
        case when in_tie and len(tie_set) > 1 then list_filter(tie_set, lambda x: x <> variant) end as tied_with,
        case
            when status <> 'ok' then 'failed'
            when sustainable_scenario is null and slo_status = 'not_enough_requests' then 'not_enough_requests'
            when sustainable_scenario is null then 'misses_slo'
            when trace_unserved and trace_slo_status = 'not_enough_requests' then 'not_enough_requests'
            when trace_unserved then 'misses_slo'
            when gate = 'fail' then 'fails_gate'
            when gate = 'not_enough_evidence' then 'not_enough_evidence'
            when objective is null then 'not_ranked'
            when rank = 1 then 'recommended'
            else 'passes'
        end as verdict,
        case
            when status <> 'ok' then 'failed: ' || coalesce(split_part(trim(error), chr(10), 1), 'no error recorded')
            when sustainable_scenario is null then slo_note
            when trace_unserved then 'does not serve the replayed trace within the SLO: '
                || coalesce(trace_fail_reason, 'no trace step measured')
            when gate = 'fail' then gate_metric || ': ' || gate_reason
            when gate = 'not_enough_evidence' then gate_metric || ': ' || gate_reason
                || case
                    when identity_n_needed is not null
                        then printf('; ~%d identical greedy outputs needed (have %d of %d)', identity_n_needed,
                                    identity_same, identity_n)
                    when n_needed_if_equal is not null and n_needed is not null
                        then printf('; ~%d paired samples needed if it is truly equal, ~%d at the observed effect (have %d)',
                                    n_needed_if_equal, n_needed, n)
                    when n_needed is not null then printf('; ~%d paired samples needed (have %d)', n_needed, n)
                    else ''
                end
            when objective is null then 'no ' || optimise || ' value'
                || coalesce(': ' || case optimise when 'cost' then cost_note when 'energy' then energy_note
                                                  when 'cost_per_correct' then efficiency_note end, '')
            when rank = 1 and in_tie and len(tie_set) > 1
                then 'best ' || optimise || ', tied with ' || array_to_string(list_filter(tie_set, lambda x: x <> variant), ', ')
                     || case tie_set_basis
                            when 'pairs' then ' (the interval of their ratio, paired round by round, takes in 1 or lies '
                                              || 'within ' || tie_tolerance_pct || ' %)'
                            when 'intervals' then ' (their intervals overlap)'
                            else ' (within ' || tie_tolerance_pct || ' %)' end
                     || ': chosen on the retention lower bound, then the reference'
            when rank = 1 then 'best ' || case when load_basis = 'trace' and optimise = 'rate' then 'goodput on the trace'
                                               else optimise end || ' among variants that meet the SLO and pass the gate'
            else printf('meets the SLO and passes the gate; %s %.2fx the recommended', optimise, objective / nullif(recommended_objective, 0))
                || case when paired_ratio_ci_low is not null and variant <> best_variant
                        then printf(' (%.2f-%.2fx %s, paired over %d rounds)', paired_ratio_ci_low, paired_ratio_ci_high,
                                    best_variant, paired_rounds)
                        else '' end
        end as verdict_reason,
        case
            when recommended_variant is null or variant = recommended_variant or objective is null then null
            else score > recommended_score
        end as beats_recommended,
        recommended_variant,
        case
            when recommended_variant is not null then null
            when not any_ok then 'no variant completed'
            when not any_slo and any_too_few then 'no variant shows the SLO met at any measured step (too few requests '
                || 'for the percentile at some: n_needed_slo)'
            when not any_slo then 'no variant meets the SLO at any measured step'
            when not any_slo_and_trace then 'no variant that sustains a load serves the replayed trace within the SLO'
            when not any_eligible then 'no variant that meets the SLO passes the quality gate'
            else 'no variant that passes has a ' || optimise || ' value'
        end as decision_note,
        trace_slo_status,
        trace_slo_attainment_pct,
        trace_goodput_req_s,
        trace_offered_req_s,
        trace_n,
        trace_send_error_ms_p99,
        trace_fail_reason
    from chosen
)

select * from final
