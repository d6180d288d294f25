-- Prices of a variant from its config (for v_cost). NULL when the config gives none.
alter table variants add column usd_per_hour double;           -- hardware cost, USD/hour
alter table variants add column usd_per_1m_input_tok double;   -- hosted price, USD per 1M input tokens
alter table variants add column usd_per_1m_output_tok double;  -- hosted price, USD per 1M output tokens
