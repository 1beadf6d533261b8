ALTER TABLE api_keys DROP KEY api_keys_prefix;
