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
#define ARNOLD_MAX_NODES (1u << 16)  /* hosts in a job's node list */
#define ARNOLD_MAX_NODELIST 65536    /* bytes of a node list expression */

struct arnold_header {
	uint32_t world_size;
	uint32_t tp, pp, dp;
	uint32_t cp, ep; /* optional headers; 1 when absent */
	uint32_t master_port;
	char master_addr[ARNOLD_MAX_NAME + 1];
	char placement_id[ARNOLD_MAX_NAME + 1];
	char order[ARNOLD_MAX_NAME + 1];
};

struct arnold_entry {
	uint32_t rank, local_rank, tp, pp, dp;
	uint32_t cp; /* the seventh column when the header says cp > 1; else 0 */
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

/*
 * Check that the file's nodes (the node names of its rank lines) are exactly the hosts of
 * `nodelist`, a Slurm hostlist expression such as "n[001-004,010],gpu7" (one bracket group
 * per host name). The buffer must already have passed arnold_rankorder_lookup. Returns 0 when
 * the two sets are equal; -1 otherwise, with *err naming a node found on one side only.
 */
int arnold_rankorder_nodes_match(const char *buf, size_t len, const char *nodelist,
				 struct arnold_error *err);

/*
 * Expand a Slurm hostlist expression into at most `max` names of ARNOLD_MAX_NAME + 1 bytes
 * each (`names` holds max * (ARNOLD_MAX_NAME + 1) bytes). Returns the count, or -1 with *err.
 */
long arnold_hostlist_expand(const char *list, char *names, size_t max,
			    struct arnold_error *err);

#endif
