/* The pyramid option of io/sink.h from C (tests/slide checks the files'
 * pixels with tifffile and OpenSlide): what it refuses, naming the file;
 * a commit with rows missing and a write past the end; a pyramid into a
 * caller's output (sg_sink_open_output); and that none of these leaves a
 * file or a scratch level behind. */
#include "io/sink.h"
#include "testlib.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/segrt_test_sink_slide_XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[2][256];
    static int k;
    k = (k + 1) % 2;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* Names in dir (. and .. aside). */
static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static sg_sink_desc labels(int64_t h, int64_t w)
{
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = SEGRT_DTYPE_UINT8;
    d.n_dims = 2;
    d.channels = 1;
    d.dims[0] = 1;
    d.dims[1] = h;
    d.dims[2] = w;
    d.pyramid = true;
    d.tile[0] = d.tile[1] = 16;
    return d;
}

static void refused(void)
{
    sg_sink *s = (sg_sink *)1;
    sg_sink_desc d = labels(40, 40);
    d.n_dims = 3;
    d.dims[0] = 2;
    CHECK(sg_sink_open(in_dir("v.tif"), &d, &s) == SEGRT_ERROR_UNSUPPORTED && s == NULL &&
          strstr(segrt_last_error(), "v.tif"));
    d = labels(40, 40);
    d.dtype = SEGRT_DTYPE_INT16;
    CHECK(sg_sink_open(in_dir("i.tif"), &d, &s) == SEGRT_ERROR_UNSUPPORTED && strstr(segrt_last_error(), "i.tif"));
    d = labels(40, 40);
    d.tile[1] = 24;
    CHECK(sg_sink_open(in_dir("t.tif"), &d, &s) == SEGRT_ERROR_INVALID_ARGUMENT &&
          strstr(segrt_last_error(), "t.tif") && strstr(segrt_last_error(), "multiples of 16"));
    d = labels(40, 40);
    CHECK(sg_sink_open(in_dir("p.nii"), &d, &s) == SEGRT_ERROR_INVALID_ARGUMENT &&
          strstr(segrt_last_error(), "p.nii"));
    CHECK(entries() == 0);
}

static void incomplete(void)
{
    uint8_t buf[40 * 40] = {0};
    sg_sink_desc d = labels(40, 40);
    sg_sink *s;
    sg_box half = {{0, 0, 0}, {1, 20, 40}}, rest = {{0, 20, 0}, {1, 20, 40}}, more = {{0, 40, 0}, {1, 1, 40}};
    CHECK(sg_sink_open(in_dir("m.tif"), &d, &s) == SEGRT_OK && sg_sink_write(s, &half, buf) == SEGRT_OK);
    CHECK(entries() > 2); /* the destination's and the scratch levels' temporary files */
    CHECK(sg_sink_commit(s) == SEGRT_ERROR_INVALID_ARGUMENT && strstr(segrt_last_error(), "m.tif"));
    CHECK(entries() == 0);
    CHECK(sg_sink_open(in_dir("m.tif"), &d, &s) == SEGRT_OK && sg_sink_write(s, &half, buf) == SEGRT_OK &&
          sg_sink_write(s, &rest, buf) == SEGRT_OK);
    CHECK(sg_sink_write(s, &more, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_sink_discard(s);
    CHECK(entries() == 0);
}

/* Into a caller's output: the sink finishes the file, the caller commits
 * it; the scratch levels are gone before that. */
static void borrowed(void)
{
    uint8_t buf[50 * 70];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i % 3);
    sg_sink_desc d = labels(50, 70);
    sg_output *o;
    sg_sink *s;
    sg_box all = {{0, 0, 0}, {1, 50, 70}};
    CHECK(sg_output_open(in_dir("o.tif"), &o) == SEGRT_OK);
    CHECK(sg_sink_open_output(o, &d, &s) == SEGRT_OK && sg_sink_write(s, &all, buf) == SEGRT_OK &&
          sg_sink_commit(s) == SEGRT_OK);
    CHECK(entries() == 1); /* the caller's temporary file */
    CHECK(sg_output_commit(o) == SEGRT_OK && entries() == 1 && access(in_dir("o.tif"), F_OK) == 0);
    unlink(in_dir("o.tif"));
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    refused();
    incomplete();
    borrowed();
    rmdir(dir);
    return sg_test_finish("test_sink_slide");
}
