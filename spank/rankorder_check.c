/*
 * rankorder-check FILE NODE LOCAL_RANK [NODELIST]: what the plugin would export, or its error
 * (exit 1); with NODELIST, also the plugin's check that the file's nodes are exactly those.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rankorder.h"

int main(int argc, char **argv)
{
	static char buf[1 << 20];
	struct arnold_header hdr;
	struct arnold_entry e;
	struct arnold_error err;
	size_t len;
	FILE *f;

	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: rankorder-check FILE NODE LOCAL_RANK [NODELIST]\n");
		return 2;
	}
	f = fopen(argv[1], "rb");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (arnold_rankorder_lookup(buf, len, argv[2], (uint32_t)strtoul(argv[3], NULL, 10), &hdr,
				    &e, &err) != 0 ||
	    (argc == 5 && arnold_rankorder_nodes_match(buf, len, argv[4], &err) != 0)) {
		if (err.line)
			printf("arnold: %s: line %lu: %s\n", argv[1], err.line, err.message);
		else
			printf("arnold: %s: %s\n", argv[1], err.message);
		return 1;
	}
	printf("RANK=%u LOCAL_RANK=%u WORLD_SIZE=%u MASTER_ADDR=%s MASTER_PORT=%u "
	       "ARNOLD_TP_RANK=%u ARNOLD_PP_RANK=%u ARNOLD_DP_RANK=%u ARNOLD_CP_RANK=%u "
	       "ARNOLD_EP_RANK=%u ARNOLD_PLACEMENT_ID=%s\n",
	       e.rank, e.local_rank, hdr.world_size, hdr.master_addr, hdr.master_port, e.tp, e.pp,
	       e.dp, e.cp, e.dp % hdr.ep, hdr.placement_id);
	return 0;
}
