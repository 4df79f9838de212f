-- Row counts of the warehouse's main tables, in the order `mrqa status` prints them.
SELECT table_name, n FROM (
    SELECT 1 AS pos, 'recipes' AS table_name, count(*) AS n FROM recipes
    UNION ALL SELECT 2, 'steps', count(*) FROM steps
    UNION ALL SELECT 3, 'step_tokens', count(*) FROM step_tokens
    UNION ALL SELECT 4, 'images', count(*) FROM images
    UNION ALL SELECT 5, 'pages', count(*) FROM pages
    UNION ALL SELECT 6, 'rejects', count(*) FROM rejects
    UNION ALL SELECT 7, 'datasets', count(*) FROM datasets
    UNION ALL SELECT 8, 'questions', count(*) FROM questions
    UNION ALL SELECT 9, 'runs', count(*) FROM runs
)
ORDER BY pos;
