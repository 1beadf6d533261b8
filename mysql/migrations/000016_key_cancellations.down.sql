DROP TABLE key_cancellations;
