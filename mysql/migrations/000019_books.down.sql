ALTER TABLE idempotency_keys DROP KEY idempotency_keys_created;
ALTER TABLE refunds DROP KEY refunds_books;
ALTER TABLE payments DROP KEY payments_books;
DROP TABLE books_discrepancies;
DROP TABLE books_runs;
