-- v_energy: energy of every (run_id, variant, scenario), measured as the difference of a hardware
-- energy counter (NVML or RAPL) over the measured window; never estimated. Columns:
--   run_id, variant, scenario, concurrency
--   energy_j                      J, over the measured window
--   energy_j_per_token            J per output token
--   tokens_per_j                  output tokens per J
--   mean_power_w                  W, energy / window duration
--   energy_source                 nvml | rapl | NULL
--   energy_note                   why energy is NULL
--   energy_ratio_vs_reference     energy_j_per_token / the reference's, same run and scenario

with scenario_energy as (
    select
        s.run_id,
        s.variant,
        s.scenario,
        s.concurrency,
        s.energy_j,
        s.energy_j_per_token,
        1 / nullif(s.energy_j_per_token, 0) as tokens_per_j,
        s.mean_power_w,
        s.energy_source,
        s.energy_note,
        v.is_reference
    from perf_summary as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
),

final as (
    select
        e.* exclude (is_reference),
        e.energy_j_per_token / nullif(r.energy_j_per_token, 0) as energy_ratio_vs_reference
    from scenario_energy as e
    left join scenario_energy as r
        on e.run_id = r.run_id and e.scenario = r.scenario and r.is_reference
)

select * from final
