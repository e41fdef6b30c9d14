/* The backends of this build, by device kind and by name. */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

static const sg_backend *const backends[] = {
    &sg_cpu_backend,
#ifdef SEGRT_HAVE_CUDA
    &sg_cuda_backend,
#endif
};

const sg_backend *sg_backend_for(segrt_device_kind kind)
{
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
        if (backends[i]->device == kind)
            return backends[i];
    return NULL;
}

const sg_backend *sg_backend_named(const char *name)
{
    for (size_t i = 0; name && i < sizeof backends / sizeof *backends; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

sg_eval_lookup sg_backend_host_eval(void)
{
    return sg_cpu_backend.eval;
}

bool sg_cuda_code_in(const char *list, int cc, int *code_cc, bool *code_a)
{
    /* The CUDA runtime's rule: machine code sm_XY runs on capability X.Z
     * for Z >= Y (sm_XYa on X.Y only), the highest such first; else PTX
     * compute_XY for XY <= cc, just-in-time compiled. */
    int best_sass = 0, best_ptx = 0;
    bool best_a = false;
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int v = 0, n = 0;
        if (len > 3 && strncmp(s, "sm_", 3) == 0 && sscanf(s + 3, "%d%n", &v, &n) == 1) {
            bool a = s[3 + n] == 'a';
            bool runs = a ? v == cc : v / 10 == cc / 10 && v % 10 <= cc % 10;
            if (runs && v >= best_sass) {
                best_a = a || (v == best_sass && best_a);
                best_sass = v;
            }
        } else if (len > 8 && strncmp(s, "compute_", 8) == 0 && sscanf(s + 8, "%d%n", &v, &n) == 1 &&
                   s[8 + n] != 'a' && v <= cc && v > best_ptx) {
            best_ptx = v;
        }
        s = e ? e + 1 : s + len;
    }
    *code_cc = best_sass ? best_sass : best_ptx;
    *code_a = best_sass && best_a;
    return *code_cc != 0;
}

void sg_report_node(segrt_build_report *r, const char *node, const char *op, double seconds)
{
    int32_t n = r->n_slowest, at = n;
    while (at > 0 && r->slowest[at - 1].seconds < seconds)
        at--;
    if (at >= SEGRT_BUILD_REPORT_NODES)
        return;
    if (n == SEGRT_BUILD_REPORT_NODES)
        n--; /* the last one drops out */
    memmove(&r->slowest[at + 1], &r->slowest[at], (size_t)(n - at) * sizeof r->slowest[0]);
    segrt_build_node_time *e = &r->slowest[at];
    snprintf(e->node, sizeof e->node, "%s", node ? node : "");
    snprintf(e->op, sizeof e->op, "%s", op ? op : "");
    e->seconds = seconds;
    r->n_slowest = n + 1;
}

void sg_report_add(segrt_build_report *into, const segrt_build_report *r)
{
    into->backend_seconds += r->backend_seconds;
    into->cudnn_searches += r->cudnn_searches;
    into->cudnn_reused += r->cudnn_reused;
    into->cudnn_finalized += r->cudnn_finalized;
    into->cudnn_seconds += r->cudnn_seconds;
    for (int32_t i = 0; i < r->n_slowest; i++)
        sg_report_node(into, r->slowest[i].node, r->slowest[i].op, r->slowest[i].seconds);
}
