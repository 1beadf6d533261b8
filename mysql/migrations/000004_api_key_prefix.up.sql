-- Keys are found by their visible prefix and then compared in constant time.
ALTER TABLE api_keys ADD KEY api_keys_prefix (prefix);
