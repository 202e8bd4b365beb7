/*
 * The paging arithmetic of the node registry: the cursor of status's node
 * pages (cluster_nodes_after: the first node after a node id) and the
 * pages of verify --cluster's node names (cluster_names_page_end). Every
 * node or name is given once, in order, whatever the page size, and a node
 * registered all along is listed once while others join and leave between
 * pages.
 */
#define _GNU_SOURCE
#include "cluster/cluster_nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"

static int id_cmp(const void *a, const void *b) {
    return strcmp(((const struct cluster_node *)a)->node_id,
                  ((const struct cluster_node *)b)->node_id);
}

/* n nodes named fmt % (i * step), sorted as cluster_nodes_read() leaves
 * them. */
static struct cluster_node *make_nodes(size_t n, unsigned step) {
    struct cluster_node *v = calloc(n > 0 ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        snprintf(v[i].node_id, sizeof(v[i].node_id), "node-%05u",
                 (unsigned)i * step);
    qsort(v, n, sizeof(*v), id_cmp);
    return v;
}

TEST(after_edges) {
    struct cluster_node *v = make_nodes(5, 10); /* 0 10 20 30 40 */
    CHECK_EQ_INT(cluster_nodes_after(v, 5, NULL), 0);
    CHECK_EQ_INT(cluster_nodes_after(v, 5, ""), 0);
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "a"), 0); /* before them all */
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "node-00000"), 1);
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "node-00015"), 2); /* gone one */
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "node-00030"), 4);
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "node-00040"), 5);
    CHECK_EQ_INT(cluster_nodes_after(v, 5, "zzz"), 5);
    CHECK_EQ_INT(cluster_nodes_after(v, 0, "node-00000"), 0);
    free(v);
}

TEST(after_bytewise_order) {
    /* etcd orders keys by bytes: a UTF-8 id sorts after every ASCII one. */
    struct cluster_node v[3] = {0};
    strcpy(v[0].node_id, "Z");
    strcpy(v[1].node_id, "z");
    strcpy(v[2].node_id, "\xc3\xa9t\xc3\xa9");
    CHECK_EQ_INT(cluster_nodes_after(v, 3, "z"), 2);
    CHECK_EQ_INT(cluster_nodes_after(v, 3, "\xc3\xa9"), 2);
    CHECK_EQ_INT(cluster_nodes_after(v, 3, "\xc3\xa9t\xc3\xa9"), 3);
}

/* Page through v (n nodes) k at a time as admin.c does: the cursor is the
 * last node id of the page. Returns how many were listed into out. */
static size_t page_all(const struct cluster_node *v, size_t n, size_t k,
                       char (*out)[CLUSTER_MAX_NODE_ID + 1]) {
    char after[CLUSTER_MAX_NODE_ID + 1] = "";
    size_t listed = 0;
    for (;;) {
        size_t i = cluster_nodes_after(v, n, after);
        size_t m = n - i < k ? n - i : k;
        for (size_t j = 0; j < m; j++)
            strcpy(out[listed++], v[i + j].node_id);
        if (i + m >= n || m == 0)
            break;
        strcpy(after, v[i + m - 1].node_id);
    }
    return listed;
}

TEST(every_node_once_whatever_the_page) {
    size_t sizes[] = {0, 1, 255, 256, 257, 1000, 1102};
    size_t pages[] = {1, 7, 256, 1000, 5000};
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
        size_t n = sizes[a];
        struct cluster_node *v = make_nodes(n, 1);
        char(*out)[CLUSTER_MAX_NODE_ID + 1] = calloc(n + 1, sizeof(*out));
        for (size_t b = 0; b < sizeof(pages) / sizeof(pages[0]); b++) {
            CHECK_EQ_INT(page_all(v, n, pages[b], out), n);
            for (size_t i = 0; i < n; i++)
                CHECK_STR(out[i], v[i].node_id);
        }
        free(out);
        free(v);
    }
}

TEST(registry_changes_between_pages) {
    /* 600 nodes, pages of 256; between the first and the second page, the
     * node at the cursor and 50 others leave and 80 join (on both sides of
     * the cursor). Every node there all along is listed once, in order;
     * none twice. */
    size_t n = 600;
    struct cluster_node *v = make_nodes(n, 2); /* even ids */
    size_t i = cluster_nodes_after(v, n, "");
    char after[CLUSTER_MAX_NODE_ID + 1];
    strcpy(after, v[i + 255].node_id);
    char(*seen)[CLUSTER_MAX_NODE_ID + 1] = calloc(n * 2, sizeof(*seen));
    size_t listed = 0;
    for (size_t j = 0; j < 256; j++)
        strcpy(seen[listed++], v[j].node_id);
    /* The change: drop the cursor's node and every 10th; add odd ids. */
    struct cluster_node *w = calloc(n + 80, sizeof(*w));
    size_t m = 0;
    int *kept = calloc(n, sizeof(*kept));
    for (size_t j = 0; j < n; j++) {
        if (j == 255 || j % 10 == 3)
            continue;
        kept[j] = 1;
        w[m++] = v[j];
    }
    for (unsigned j = 0; j < 80; j++)
        snprintf(w[m++].node_id, sizeof(w[0].node_id), "node-%05u", j * 14 + 1);
    qsort(w, m, sizeof(*w), id_cmp);
    for (;;) {
        size_t s = cluster_nodes_after(w, m, after);
        size_t k = m - s < 256 ? m - s : 256;
        for (size_t j = 0; j < k; j++)
            strcpy(seen[listed++], w[s + j].node_id);
        if (s + k >= m)
            break;
        strcpy(after, w[s + k - 1].node_id);
    }
    for (size_t j = 1; j < listed; j++)
        CHECK(strcmp(seen[j - 1], seen[j]) < 0); /* in order: no repeat */
    for (size_t j = 0; j < n; j++) {
        if (!kept[j])
            continue;
        int found = 0;
        for (size_t x = 0; x < listed; x++)
            found += strcmp(seen[x], v[j].node_id) == 0;
        CHECK_EQ_INT(found, 1);
    }
    free(kept);
    free(w);
    free(seen);
    free(v);
}

TEST(names_page_end_limits) {
    char *a[] = {"n0", "n1", "n2"};
    char *b[] = {"u0: refused", "u1: no --listen address"};
    /* By count, across the two lists. */
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 0, 2, 1 << 20), 2);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 2, 2, 1 << 20), 4);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 4, 2, 1 << 20), 5);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 5, 2, 1 << 20), 5);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 9, 2, 1 << 20), 9);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 0, 1000, 1 << 20), 5);
    /* By bytes: 2 + 2 + 2 fit in 6, the next does not. */
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 0, 1000, 6), 3);
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 0, 1000, 5), 2);
    /* A name longer than the byte cap still makes a page of one. */
    CHECK_EQ_INT(cluster_names_page_end(a, 3, b, 2, 3, 1000, 4), 4);
    CHECK_EQ_INT(cluster_names_page_end(NULL, 0, NULL, 0, 0, 10, 10), 0);
}

TEST(names_pages_cover_every_name_once) {
    size_t na = 1300, nb = 700;
    char **a = calloc(na, sizeof(*a)), **b = calloc(nb, sizeof(*b));
    for (size_t i = 0; i < na; i++)
        asprintf(&a[i], "node-%zu", i);
    for (size_t i = 0; i < nb; i++)
        asprintf(&b[i], "gone-%zu: %*s", i, (int)(i % 300), "why");
    size_t caps[][2] = {{1000, 256 << 10}, {1, 1 << 20}, {1000, 4096}};
    for (size_t c = 0; c < 3; c++) {
        size_t start = 0, pages = 0, given = 0;
        while (start < na + nb) {
            size_t end = cluster_names_page_end(a, na, b, nb, start, caps[c][0],
                                                caps[c][1]);
            CHECK(end > start);
            CHECK(end - start <= caps[c][0]);
            size_t bytes = 0;
            for (size_t i = start; i < end; i++)
                bytes += strlen(i < na ? a[i] : b[i - na]);
            CHECK(end - start == 1 || bytes <= caps[c][1]);
            given += end - start;
            start = end;
            pages++;
        }
        CHECK_EQ_INT(given, na + nb);
        if (c == 0)
            CHECK_EQ_INT(pages, 2);
    }
    for (size_t i = 0; i < na; i++)
        free(a[i]);
    for (size_t i = 0; i < nb; i++)
        free(b[i]);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
