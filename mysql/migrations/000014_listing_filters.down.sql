ALTER TABLE refunds
    DROP KEY refunds_status;
ALTER TABLE payments
    DROP KEY payments_status,
    ADD KEY payments_status (status, created_at);
