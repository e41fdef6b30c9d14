/* segrt run: a model over NPY inputs, NPY outputs; with --roi, over an
 * image larger than the model's window (cli_sw.c). */
#include "cli_engine.h"
#include "cli_files.h"
#include "cli_sw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char run_usage[] =
    "usage: segrt run MODEL|PLAN --input [NAME=]IN.npy... --output [NAME=]OUT.npy...\n"
    "                 [engine options] [--quiet]\n"
    "       segrt run MODEL IMAGE.npy -o OUT.npy --roi 96,96,96 [sliding-window options]\n"
    "       segrt run MODEL IMAGE.png -o LABELS.png [--overlay OVERLAY.png] [sliding-window options]\n"
    "       segrt run MODEL CT.nii.gz|DICOM_DIR -o LABELS.nii.gz [--series UID] [sliding-window options]\n"
    "       segrt run MODEL DICOM_DIR -o LABELS.dcm [--series UID] [--allow-uneven] [sliding-window options]\n"
    "       segrt run MODEL -i IN_DIR -o OUT_DIR [--continue] [--no-prefetch] [sliding-window options]\n"
    "Inputs and outputs are matched by NAME, or by position when no name is given.\n"
    "MODEL is an .onnx file (on CUDA, built through the plan cache) or a plan from `segrt build`.\n"
    CLI_ENGINE_USAGE CLI_SW_USAGE CLI_CASES_USAGE;

#define MAX_IO 64

typedef struct io_arg {
    char *name; /* NULL: by position */
    char *path;
} io_arg;

static void split_io(char *arg, io_arg *out)
{
    /* NAME=path, unless what precedes '=' looks like a path. */
    char *eq = strchr(arg, '=');
    if (eq && !memchr(arg, '/', (size_t)(eq - arg))) {
        *eq = '\0';
        out->name = arg;
        out->path = eq + 1;
    } else {
        out->name = NULL;
        out->path = arg;
    }
}

/* Index of the model input or output called name, or -1. */
static int find_io(const segrt_engine *e, bool input, const char *name)
{
    size_t n = input ? segrt_engine_input_count(e) : segrt_engine_output_count(e);
    for (size_t i = 0; i < n; i++) {
        segrt_tensor_desc d;
        if ((input ? segrt_engine_input(e, i, &d) : segrt_engine_output(e, i, &d)) == SEGRT_OK &&
            strcmp(d.name, name) == 0)
            return (int)i;
    }
    return -1;
}

typedef struct run_state {
    segrt_model *model;
    segrt_build_options *opts;
    segrt_engine *engine;
    segrt_context *ctx;
    segrt_tensor in_data[MAX_IO];
    int n_in_data;
    segrt_tensor inputs[MAX_IO], outputs[MAX_IO];
} run_state;

static void run_state_free(run_state *st)
{
    for (int i = 0; i < st->n_in_data; i++)
        segrt_tensor_free(&st->in_data[i]);
    for (int i = 0; i < MAX_IO; i++)
        free(st->outputs[i].data);
    segrt_context_destroy(st->ctx);
    segrt_engine_destroy(st->engine);
    segrt_build_options_destroy(st->opts);
    segrt_model_destroy(st->model);
}

/* Index of the engine input named name, or -1. */
static int input_slot(const segrt_engine *e, const char *name) { return find_io(e, true, name); }

static int run(run_state *st, const char *path, io_arg *ins, int n_ins, io_arg *outs, int n_outs,
               const cli_engine_opts *eo, bool quiet, cli_files *files)
{
    segrt_status s;
    bool plan = cli_is_plan_file(path);
    int rc;
    if (!plan && (rc = cli_engine_check_cpu(eo)) != CLI_OK)
        return rc;
    if (plan) {
        if ((rc = cli_plan_load(path, eo, &st->engine)) != CLI_OK)
            return rc;
    } else if ((s = segrt_model_load(path, &st->model)) != SEGRT_OK) {
        return cli_fail(s);
    }
    size_t n_model_in = plan ? segrt_engine_input_count(st->engine) : segrt_model_input_count(st->model);
    size_t n_model_out = plan ? segrt_engine_output_count(st->engine) : segrt_model_output_count(st->model);
    if ((size_t)n_ins != n_model_in)
        return cli_usage_error("%s: the model takes %zu inputs, %d given with --input", path, n_model_in, n_ins);
    if (n_outs == 0)
        return cli_usage_error("run: no --output given");
    if ((size_t)n_outs > n_model_out)
        return cli_usage_error("%s: the model gives %zu outputs, %d --output given", path, n_model_out, n_outs);
    if (!plan && (rc = cli_engine_options(eo, &st->opts)) != CLI_OK)
        return rc;
    /* Read every input and bind the model to its dims, so that the engine
     * is optimized for exactly these shapes. */
    int slot_of[MAX_IO];
    for (int i = 0; i < n_ins; i++) {
        segrt_tensor *t = &st->in_data[st->n_in_data];
        if ((s = segrt_array_load(ins[i].path, t)) != SEGRT_OK)
            return cli_fail(s);
        st->n_in_data++;
        int slot = i;
        if (ins[i].name) {
            slot = -1;
            for (size_t k = 0; k < n_model_in && slot < 0 && !plan; k++) {
                segrt_tensor_desc d;
                if (segrt_model_input(st->model, k, &d) == SEGRT_OK && strcmp(d.name, ins[i].name) == 0)
                    slot = (int)k;
            }
            if (plan)
                slot = input_slot(st->engine, ins[i].name);
            if (slot < 0)
                return cli_usage_error("%s: the model has no input `%s`", path, ins[i].name);
        }
        for (int k = 0; k < i; k++)
            if (slot_of[k] == slot)
                return cli_usage_error("run: input %d is given twice", slot);
        slot_of[i] = slot;
        segrt_tensor_desc d;
        if (plan)
            segrt_engine_input(st->engine, (size_t)slot, &d);
        else
            segrt_model_input(st->model, (size_t)slot, &d);
        /* Bind the model to the inputs' dims, unless --shape gave it a profile. */
        bool profiled = false;
        for (int k = 0; k < eo->n_shapes; k++)
            profiled |= strncmp(eo->shapes[k], d.name, strlen(d.name)) == 0 && eo->shapes[k][strlen(d.name)] == '=';
        if (!plan && !profiled && (s = segrt_build_options_set_shape(st->opts, d.name, t->rank, t->dims)) != SEGRT_OK)
            return cli_fail(s);
        segrt_tensor *in = &st->inputs[slot];
        in->dtype = t->dtype;
        in->rank = t->rank;
        memcpy(in->dims, t->dims, sizeof in->dims);
        in->data = t->data;
        in->memory = SEGRT_MEMORY_HOST;
    }
    if (!plan && (rc = cli_engine_build(st->model, st->opts, eo, &st->engine, NULL)) != CLI_OK)
        return rc;
    if ((s = segrt_context_create(st->engine, &st->ctx)) != SEGRT_OK)
        return cli_fail(s);
    if ((s = segrt_engine_output_shapes(st->engine, n_model_in, st->inputs, n_model_out, st->outputs)) !=
        SEGRT_OK)
        return cli_fail(s);
    for (size_t j = 0; j < n_model_out; j++) {
        size_t bytes = segrt_dtype_size(st->outputs[j].dtype);
        for (int32_t d = 0; d < st->outputs[j].rank; d++)
            bytes *= (size_t)st->outputs[j].dims[d];
        st->outputs[j].data = malloc(bytes ? bytes : 1);
        st->outputs[j].memory = SEGRT_MEMORY_HOST;
        if (!st->outputs[j].data)
            return cli_usage_error("out of memory for output %zu (%zu bytes)", j, bytes);
    }
    if ((s = segrt_context_run(st->ctx, n_model_in, st->inputs, n_model_out, st->outputs)) != SEGRT_OK)
        return cli_fail(s);
    int slots[MAX_IO];
    for (int i = 0; i < n_outs; i++) {
        slots[i] = outs[i].name ? find_io(st->engine, false, outs[i].name) : i;
        if (slots[i] < 0)
            return cli_usage_error("%s: the model has no output `%s`", path, outs[i].name);
    }
    /* Every output written before any is renamed into place. */
    for (int i = 0; i < n_outs; i++) {
        if ((s = segrt_array_write(files->out[i].out, &st->outputs[slots[i]])) != SEGRT_OK) {
            fprintf(stderr, "segrt: %s\n", segrt_last_error());
            return CLI_RUNTIME;
        }
    }
    for (int i = 0; i < n_outs; i++) {
        if ((rc = cli_files_commit(files, i)) != CLI_OK)
            return rc;
        if (!quiet) {
            const segrt_tensor *o = &st->outputs[slots[i]];
            segrt_tensor_desc d;
            char dims[256];
            segrt_engine_output(st->engine, (size_t)slots[i], &d);
            printf("wrote %s (%s %s) to %s\n", d.name, segrt_dtype_name(o->dtype),
                   cli_dims(o->dims, o->rank, dims, sizeof dims), outs[i].path);
        }
    }
    return CLI_OK;
}

int cmd_run(int argc, char **argv)
{
    const char *path = NULL;
    io_arg ins[MAX_IO], outs[MAX_IO];
    int n_ins = 0, n_outs = 0;
    cli_engine_opts eo;
    cli_engine_opts_init(&eo);
    cli_sw_opts so;
    cli_sw_opts_init(&so);
    cli_cases_opts co;
    memset(&co, 0, sizeof co);
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        int sw = cli_sw_option(&so, argc, argv, &i);
        if (sw < 0)
            return CLI_BAD_INPUT;
        if (sw)
            continue;
        int cases = cli_cases_option(&co, argc, argv, &i);
        if (cases < 0)
            return CLI_BAD_INPUT;
        if (cases)
            continue;
        int taken = cli_engine_option(&eo, argc, argv, &i);
        if (taken < 0)
            return CLI_BAD_INPUT;
        if (taken)
            continue;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(run_usage, stdout);
            return CLI_OK;
        } else if (strcmp(a, "--input") == 0 || strcmp(a, "-i") == 0) {
            if (!has_value || n_ins == MAX_IO)
                return cli_usage_error("%s wants a file", a);
            split_io(argv[++i], &ins[n_ins++]);
        } else if (strcmp(a, "--output") == 0 && has_value && cli_sw_output_kind(&so, argv[i + 1])) {
            i++; /* --output logits|probs|labels: what a sliding-window run writes */
        } else if (strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0) {
            if (!has_value || n_outs == MAX_IO)
                return cli_usage_error("%s wants a file", a);
            split_io(argv[++i], &outs[n_outs++]);
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = true;
        } else if (a[0] == '-') {
            return cli_usage_error("run: unknown option `%s`", a);
        } else if (!path) {
            path = a;
        } else if (n_ins < MAX_IO) {
            split_io(argv[i], &ins[n_ins++]); /* IMAGE.npy after the model */
        } else {
            return cli_usage_error("run: unexpected argument `%s`", a);
        }
    }
    if (!path)
        return cli_usage_error("run: no model given\n%s", run_usage);
    /* A folder of cases: a folder in, and out a folder, a name ending in
     * '/' or a name without an extension (a DICOM folder in with a file's
     * name out is one case, and a mistyped extension is refused as such);
     * or a folder option was given. */
    if (n_ins == 1 && n_outs == 1 && !ins[0].name && !outs[0].name && cli_is_folder(ins[0].path)) {
        const char *o = outs[0].path, *slash = strrchr(o, '/');
        co.on |= cli_is_folder(o) || (slash && !slash[1]) || !strchr(slash ? slash + 1 : o, '.');
    }
    if (co.on) {
        if (n_ins != 1 || n_outs != 1 || !cli_is_folder(ins[0].path))
            return cli_usage_error("run: a folder of cases takes -i IN_DIR (a folder) and -o OUT_DIR");
        return cli_cases_run(path, ins[0].path, outs[0].path, &so, &eo, quiet, &co);
    }
    /* An image file is always a sliding-window job: the window then comes
     * from --roi or the model's metadata. */
    bool image_in = n_ins == 1 && !ins[0].name && cli_is_image_file(ins[0].path);
    /* Named as a picture but not one by its bytes: the reader says what it
     * is (empty, not a regular file, not PNG, JPEG or TIFF), rather than
     * the run going on to read it as an array. */
    if (n_ins == 1 && !ins[0].name && !image_in && cli_is_image_name(ins[0].path)) {
        segrt_image_info info;
        segrt_status s = segrt_image_probe(ins[0].path, &info);
        return cli_fail(s != SEGRT_OK ? s : SEGRT_ERROR_INTERNAL);
    }
    if (so.any && !so.on && !image_in)
        return cli_usage_error("run: sliding-window options need --roi (or an image file)");
    if (so.on || image_in) {
        if (n_ins != 1 || n_outs != 1)
            return cli_usage_error("run: a sliding-window job takes one image and one -o OUT, not %d and %d", n_ins,
                                   n_outs);
        return cli_sw_run(path, ins[0].path, outs[0].path, &so, &eo, quiet);
    }
    cli_files files;
    memset(&files, 0, sizeof files);
    cli_files_input(&files, path, cli_is_plan_file(path) ? "the plan" : "the model");
    for (int i = 0; i < n_ins; i++)
        cli_files_input(&files, ins[i].path, "the input");
    for (int i = 0; i < n_outs; i++)
        cli_files_output(&files, outs[i].path, "--output", CLI_NPY);
    int rc = cli_files_check(&files, true);
    if (rc != CLI_OK)
        return rc;
    run_state st;
    memset(&st, 0, sizeof st);
    rc = run(&st, path, ins, n_ins, outs, n_outs, &eo, quiet, &files);
    run_state_free(&st);
    cli_files_close(&files);
    return rc;
}
