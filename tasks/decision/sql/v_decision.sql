-- v_decision: the settings of each run's decision (the config's `decision:` block, DecisionSpec in
-- tasks/core/config.py, read from runs.config_json), one row per run. A setting the run did not record (it ran
-- before the setting existed) is DecisionSpec's default, from decision_defaults (a one-row view warehouse.db
-- builds from the config model: tasks/decision/defaults.py). `tradeoff recommend --slo/--retention/--optimise/...`
-- shadows this view for its own read-only connection with a temp view of the same columns, so every
-- view built on it (v_slo_steps, v_quality_gate, v_recommendation) follows the overrides. Columns:
--   run_id
--   slo_label                      SLO preset name, or the limits as text
--   slo_ttft_ms, slo_tpot_ms,      ms, per-request limits at the SLO percentile; NULL: no limit. From
--   slo_e2el_ms                    decision.slo; a run recorded before the SLO moved under decision: null there
--                                  meant the goodput SLO its perf steps recorded (then perf.slo)
--   slo_percentile                 percentile of a step's requests that must meet each limit (MLPerf: 99)
--   slo_confidence                 confidence of each percentile claim (the order-statistic bound)
--   min_rate_ratio                 a rate step is sustained when it achieved this share of its offered rate
--   gate_metrics                   'suite.metric' list gating quality (default: the primary metric)
--   retention_target               share of the reference's score a gating metric must keep (0.99, 0.999)
--   margin_points                  non-inferiority margin in points (0.01 of a fraction) for fraction metrics,
--                                  instead of retention_target (the default gate's when the run recorded none);
--                                  NULL: the retention target applies
--   identity_gate                  a speculative variant whose plain decoding is the reference passes on its
--                                  identity evidence alone (decision.identity_gate)
--   optimise                       rate | tps | cost | energy | cost_per_correct: what the recommendation maximises
--                                  (rate, tps) or minimises (the others) among variants that pass
--   grid_gco2e_per_kwh             gCO2e per kWh, given by the user; NULL: carbon is not computed
--   tie_tolerance_pct              %, objective values this close to the best are a tie
--   min_samples                    paired samples below which a gate is not decided (quality.min_samples)
--   power                          power of the sample-size estimate for undecided gates

with settings as (
    select
        r.run_id,
        r.primary_quality_metric,
        r.config_json ->> '$.decision.slo.preset' as slo_preset,
        json_extract(r.config_json, '$.decision.slo') as slo_json,
        try_cast(r.config_json ->> '$.decision.slo.ttft_ms' as double) as ttft_ms,
        try_cast(r.config_json ->> '$.decision.slo.tpot_ms' as double) as tpot_ms,
        try_cast(r.config_json ->> '$.decision.slo.e2el_ms' as double) as e2el_ms,
        try_cast(r.config_json ->> '$.decision.percentile' as double) as percentile,
        try_cast(r.config_json ->> '$.decision.confidence' as double) as confidence,
        try_cast(r.config_json ->> '$.decision.min_rate_ratio' as double) as min_rate_ratio,
        from_json(json_extract(r.config_json, '$.decision.gate_metrics'), '["VARCHAR"]') as gate_metrics,
        try_cast(r.config_json ->> '$.decision.retention' as double) as retention,
        try_cast(r.config_json ->> '$.decision.margin_points' as double) as margin_points,
        coalesce(json_exists(r.config_json, '$.decision.margin_points'), false) as margin_points_given,
        try_cast(r.config_json ->> '$.decision.identity_gate' as boolean) as identity_gate,
        r.config_json ->> '$.decision.optimise' as optimise,
        try_cast(r.config_json ->> '$.decision.grid_gco2e_per_kwh' as double) as grid_gco2e_per_kwh,
        try_cast(r.config_json ->> '$.decision.tie_tolerance_pct' as double) as tie_tolerance_pct,
        try_cast(r.config_json ->> '$.quality.min_samples' as integer) as min_samples
    from runs as r
),

-- The goodput limits every perf step recorded: the SLO of a run recorded with decision.slo null before the SLO
-- moved under decision (null then meant perf.slo; now it means no SLO, and the steps record none).
recorded_slo as (
    select run_id, max(goodput_slo) as label, max(slo_ttft_ms) as ttft_ms, max(slo_tpot_ms) as tpot_ms,
        max(slo_e2el_ms) as e2el_ms
    from perf_summary
    group by run_id
),

final as (
    select
        s.run_id,
        case
            when s.slo_json is not null and s.slo_json <> 'null'
                then coalesce(s.slo_preset, concat_ws(',', 'ttft_ms<=' || s.ttft_ms, 'tpot_ms<=' || s.tpot_ms,
                                                      'e2el_ms<=' || s.e2el_ms))
            else p.label
        end as slo_label,
        case when s.slo_json is not null and s.slo_json <> 'null' then s.ttft_ms else p.ttft_ms end as slo_ttft_ms,
        case when s.slo_json is not null and s.slo_json <> 'null' then s.tpot_ms else p.tpot_ms end as slo_tpot_ms,
        case when s.slo_json is not null and s.slo_json <> 'null' then s.e2el_ms else p.e2el_ms end as slo_e2el_ms,
        coalesce(s.percentile, dflt.percentile) as slo_percentile,
        coalesce(s.confidence, dflt.confidence) as slo_confidence,
        coalesce(s.min_rate_ratio, dflt.min_rate_ratio) as min_rate_ratio,
        coalesce(s.gate_metrics,
                 case when s.primary_quality_metric is null then []::varchar[] else [s.primary_quality_metric] end)
            as gate_metrics,
        coalesce(s.retention, dflt.retention) as retention_target,
        case when s.margin_points_given then s.margin_points else dflt.margin_points end as margin_points,
        coalesce(s.identity_gate, dflt.identity_gate) as identity_gate,
        coalesce(s.optimise, dflt.optimise) as optimise,
        s.grid_gco2e_per_kwh,
        coalesce(s.tie_tolerance_pct, dflt.tie_tolerance_pct) as tie_tolerance_pct,
        coalesce(s.min_samples, dflt.min_samples) as min_samples,
        dflt.power
    from settings as s
    cross join decision_defaults as dflt
    left join recorded_slo as p on s.run_id = p.run_id
)

select * from final
