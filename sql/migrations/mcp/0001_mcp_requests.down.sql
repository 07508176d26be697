DROP TABLE IF EXISTS fencekit_mcp_requests;
