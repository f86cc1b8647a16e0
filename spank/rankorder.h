/*
 * arnold-rankorder v1: the parser shared by the SPANK plugin, its check tool and its fuzzer.
 * Format: docs/rankorder.md. Pure C, no Slurm headers, bounded in every dimension.
 */
#ifndef ARNOLD_RANKORDER_H
#define ARNOLD_RANKORDER_H

#include <stddef.h>
#include <stdint.h>

#define ARNOLD_MAX_LINE 512          /* bytes per line, newline included */
#define ARNOLD_MAX_RANKS (1u << 22)  /* 4,194,304 ranks */
#define ARNOLD_MAX_FILE ((size_t)256 << 20)
#define ARNOLD_MAX_NAME 64           /* node name and placement id */
#define ARNOLD_MAX_GROUP (1u << 20)  /* tp, pp, dp sizes */

struct arnold_header {
	uint32_t world_size;
	uint32_t tp, pp, dp;
	uint32_t master_port;
	char master_addr[ARNOLD_MAX_NAME + 1];
	char placement_id[ARNOLD_MAX_NAME + 1];
	char order[ARNOLD_MAX_NAME + 1];
};

struct arnold_entry {
	uint32_t rank, local_rank, tp, pp, dp;
};

struct arnold_error {
	unsigned long line; /* 0: not about one line */
	char message[160];
};

/*
 * Parse the whole buffer (validating every line) and find the entry of (node, local_rank).
 * Returns 0 and fills *hdr and *out when exactly one entry matches; -1 otherwise, with *err
 * saying which line and what is wrong (or that no entry matches).
 */
int arnold_rankorder_lookup(const char *buf, size_t len, const char *node,
			    uint32_t local_rank, struct arnold_header *hdr,
			    struct arnold_entry *out, struct arnold_error *err);

#endif
