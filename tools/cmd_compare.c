/* segrt compare: how far a result (A.npy) is from a reference (B.npy). */
#include "cli.h"
#include "json_out.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char compare_usage[] =
    "usage: segrt compare A.npy B.npy [--class-axis N] [--json]\n"
    "                     [--max-rel-l2 X] [--min-psnr DB] [--min-argmax-agreement F]\n"
    "Compares A (the result under test) with B (the reference), element by element;\n"
    "both must have the same shape, any numeric dtypes (read as double, bool as 0/1).\n"
    "  max abs error   max |A - B|\n"
    "  mean abs error  mean |A - B|\n"
    "  relative L2     ||A - B||2 / ||B||2 (0 when both are all zero)\n"
    "  PSNR            10 log10(range^2 / MSE) dB, range = max(B) - min(B) over B's\n"
    "                  finite elements, MSE = mean (A - B)^2; inf when MSE is 0\n"
    "  NaN mismatches  positions NaN in one array but not the other; any makes the\n"
    "                  errors above NaN, so every threshold fails. A position NaN in\n"
    "                  both, or the same infinity in both, counts as equal.\n"
    "--class-axis N    A and B are logits or probabilities with classes along axis N\n"
    "                  (negative counts from the end): also the fraction of positions\n"
    "                  whose argmax agrees (first maximum wins, NaN counts as the\n"
    "                  maximum, as in numpy), the Dice 2|A=c and B=c| / (|A=c| + |B=c|)\n"
    "                  of each class c of the two label maps (\"-\" where c occurs in\n"
    "                  neither), and their mean over the classes that occur\n"
    "--json            one JSON object instead: keys a, b, shape, count, max_abs, mae,\n"
    "                  mse, rel_l2, psnr_db, psnr_range, nan_mismatches, thresholds_met;\n"
    "                  with a class axis also class_axis, n_classes, argmax_agreement,\n"
    "                  dice (null for a class in neither map) and mean_dice. Values that\n"
    "                  JSON cannot hold are the strings \"inf\", \"-inf\" and \"nan\".\n"
    "Thresholds: when any is not met, one line on stderr says which, and the exit\n"
    "code is 1; otherwise 0. Bad usage or unreadable or mismatched files: 2.\n";

typedef struct compare_args {
    const char *path_a, *path_b;
    bool json, has_axis;
    int32_t axis;
    bool has_max_rel_l2, has_min_psnr, has_min_agreement;
    double max_rel_l2, min_psnr, min_agreement;
} compare_args;

/* Parses a whole string as a double; NaN is refused since no comparison
 * with it could ever hold. */
static bool parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end || isnan(v))
        return false;
    *out = v;
    return true;
}

/* A signed decimal int32 (cli_parse_int takes non-negative ones only). */
static bool parse_axis(const char *s, int32_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < -SEGRT_MAX_RANK || v >= SEGRT_MAX_RANK)
        return false;
    *out = (int32_t)v;
    return true;
}

/* The value of option `name`, given as "--name VALUE" or "--name=VALUE";
 * NULL when argv[*i] is not that option. *missing is set when the option
 * is there but its value is not. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static int parse_args(int argc, char **argv, compare_args *args)
{
    memset(args, 0, sizeof *args);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(compare_usage, stdout);
            return -1;
        } else if (strcmp(a, "--json") == 0) {
            args->json = true;
        } else if ((v = option_value(argc, argv, &i, "--class-axis", &missing)) || missing) {
            if (!parse_axis(v, &args->axis))
                return cli_usage_error("--class-axis wants an axis, like 1 or -1");
            args->has_axis = true;
        } else if ((v = option_value(argc, argv, &i, "--max-rel-l2", &missing)) || missing) {
            if (!parse_double(v, &args->max_rel_l2))
                return cli_usage_error("--max-rel-l2 wants a number, like 1e-5");
            args->has_max_rel_l2 = true;
        } else if ((v = option_value(argc, argv, &i, "--min-psnr", &missing)) || missing) {
            if (!parse_double(v, &args->min_psnr))
                return cli_usage_error("--min-psnr wants a number of dB, like 40");
            args->has_min_psnr = true;
        } else if ((v = option_value(argc, argv, &i, "--min-argmax-agreement", &missing)) || missing) {
            if (!parse_double(v, &args->min_agreement))
                return cli_usage_error("--min-argmax-agreement wants a fraction, like 0.999");
            args->has_min_agreement = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_usage_error("compare: unknown option `%s`", a);
        } else if (!args->path_a) {
            args->path_a = a;
        } else if (!args->path_b) {
            args->path_b = a;
        } else {
            return cli_usage_error("compare: more than two files given (`%s`)", a);
        }
    }
    if (!args->path_b)
        return cli_usage_error("compare: wants two files, A.npy (under test) and B.npy (reference)");
    if (args->has_min_agreement && !args->has_axis)
        return cli_usage_error("compare: --min-argmax-agreement needs --class-axis");
    return CLI_OK;
}

/* A metric for text output: %g, which prints inf and nan as such. */
static void print_metric(const char *label, double v, const char *unit)
{
    printf("%-18s %.6g%s\n", label, v, unit);
}

static void print_text(const compare_args *args, const segrt_tensor *a, const segrt_tensor *b,
                       const segrt_compare_stats *st, const segrt_class_stats *cs)
{
    char dims[256];
    printf("A: %s (%s %s)\n", args->path_a, segrt_dtype_name(a->dtype), cli_dims(a->dims, a->rank, dims, sizeof dims));
    printf("B: %s (%s %s)\n", args->path_b, segrt_dtype_name(b->dtype), cli_dims(b->dims, b->rank, dims, sizeof dims));
    printf("%-18s %lld\n", "elements:", (long long)st->count);
    print_metric("max abs error:", st->max_abs, "");
    print_metric("mean abs error:", st->mae, "");
    print_metric("relative L2:", st->rel_l2, "");
    print_metric("PSNR:", st->psnr_db, " dB");
    printf("%-18s %lld\n", "NaN mismatches:", (long long)st->nan_mismatches);
    if (!cs)
        return;
    printf("%-18s %d (%lld classes, %lld positions)\n", "class axis:", (int)cs->axis,
           (long long)cs->n_classes, (long long)cs->positions);
    printf("%-18s %.6g (%lld of %lld)\n", "argmax agreement:", cs->argmax_agreement,
           (long long)cs->agree, (long long)cs->positions);
    printf("%-18s", "dice:");
    for (int64_t c = 0; c < cs->n_classes; c++) {
        if (isnan(cs->dice[c]))
            printf(" -");
        else
            printf(" %.6g", cs->dice[c]);
    }
    printf("\n");
    printf("%-18s %.6g (over %lld classes present)\n", "mean dice:", cs->mean_dice,
           (long long)cs->n_present);
}

static void print_json(const compare_args *args, const segrt_tensor *a, const segrt_compare_stats *st,
                       const segrt_class_stats *cs, bool met)
{
    json_out j;
    json_init(&j, stdout);
    json_begin_object(&j);
    json_key(&j, "a");
    json_string(&j, args->path_a);
    json_key(&j, "b");
    json_string(&j, args->path_b);
    json_key(&j, "shape");
    json_begin_array(&j);
    for (int32_t d = 0; d < a->rank; d++)
        json_int(&j, a->dims[d]);
    json_end_array(&j);
    json_key(&j, "count");
    json_int(&j, st->count);
    json_key(&j, "max_abs");
    json_double(&j, st->max_abs);
    json_key(&j, "mae");
    json_double(&j, st->mae);
    json_key(&j, "mse");
    json_double(&j, st->mse);
    json_key(&j, "rel_l2");
    json_double(&j, st->rel_l2);
    json_key(&j, "psnr_db");
    json_double(&j, st->psnr_db);
    json_key(&j, "psnr_range");
    json_double(&j, st->range);
    json_key(&j, "nan_mismatches");
    json_int(&j, st->nan_mismatches);
    if (cs) {
        json_key(&j, "class_axis");
        json_int(&j, cs->axis);
        json_key(&j, "n_classes");
        json_int(&j, cs->n_classes);
        json_key(&j, "argmax_agreement");
        json_double(&j, cs->argmax_agreement);
        json_key(&j, "dice");
        json_begin_array(&j);
        for (int64_t c = 0; c < cs->n_classes; c++) {
            if (isnan(cs->dice[c]))
                json_null(&j);
            else
                json_double(&j, cs->dice[c]);
        }
        json_end_array(&j);
        json_key(&j, "mean_dice");
        json_double(&j, cs->mean_dice);
    }
    json_key(&j, "thresholds_met");
    json_bool(&j, met);
    json_end_object(&j);
}

/* Checks the thresholds; writes what failed, "; "-separated, into msg.
 * Written as !(x <= limit) so that a NaN metric fails. */
static bool check_thresholds(const compare_args *args, const segrt_compare_stats *st, const segrt_class_stats *cs,
                             char *msg, size_t cap)
{
    size_t used = 0;
    msg[0] = '\0';
    if (args->has_max_rel_l2 && !(st->rel_l2 <= args->max_rel_l2))
        used += (size_t)snprintf(msg + used, cap - used, "%srelative L2 %.6g > %.6g (--max-rel-l2)",
                                 used ? "; " : "", st->rel_l2, args->max_rel_l2);
    if (used < cap && args->has_min_psnr && !(st->psnr_db >= args->min_psnr))
        used += (size_t)snprintf(msg + used, cap - used, "%sPSNR %.6g dB < %.6g dB (--min-psnr)",
                                 used ? "; " : "", st->psnr_db, args->min_psnr);
    if (used < cap && cs && args->has_min_agreement && !(cs->argmax_agreement >= args->min_agreement))
        used += (size_t)snprintf(msg + used, cap - used,
                                 "%sargmax agreement %.6g < %.6g (--min-argmax-agreement)",
                                 used ? "; " : "", cs->argmax_agreement, args->min_agreement);
    return used == 0;
}

static int compare(const compare_args *args, segrt_tensor *a, segrt_tensor *b)
{
    segrt_status s;
    if ((s = segrt_array_load(args->path_a, a)) != SEGRT_OK)
        return cli_fail(s);
    if ((s = segrt_array_load(args->path_b, b)) != SEGRT_OK)
        return cli_fail(s);
    segrt_compare_stats st;
    segrt_class_stats cs;
    memset(&cs, 0, sizeof cs);
    if ((s = segrt_compare(a, b, &st)) != SEGRT_OK ||
        (args->has_axis && (s = segrt_compare_classes(a, b, args->axis, &cs)) != SEGRT_OK)) {
        /* The library names no file here: the message gets both. */
        fprintf(stderr, "segrt: compare %s with %s: %s\n", args->path_a, args->path_b, segrt_last_error());
        return s == SEGRT_ERROR_OUT_OF_MEMORY ? CLI_RUNTIME : CLI_BAD_INPUT;
    }
    const segrt_class_stats *csp = args->has_axis ? &cs : NULL;
    char msg[512];
    bool met = check_thresholds(args, &st, csp, msg, sizeof msg);
    if (args->json)
        print_json(args, a, &st, csp, met);
    else
        print_text(args, a, b, &st, csp);
    fflush(stdout);
    segrt_class_stats_free(&cs);
    if (!met) {
        fprintf(stderr, "segrt: compare %s with %s: threshold not met: %s\n", args->path_a, args->path_b,
                msg);
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

int cmd_compare(int argc, char **argv)
{
    compare_args args;
    int rc = parse_args(argc, argv, &args);
    if (rc < 0)
        return CLI_OK; /* --help */
    if (rc != CLI_OK)
        return rc;
    segrt_tensor a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    rc = compare(&args, &a, &b);
    segrt_tensor_free(&a);
    segrt_tensor_free(&b);
    return rc;
}
