-- every reject names its stage, key and reason
SELECT * FROM rejects WHERE stage IS NULL OR key IS NULL OR reason IS NULL OR reason = '';
