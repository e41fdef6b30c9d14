// The GDCM shim (dicom_gdcm.h): GDCM's C++ behind two C functions. Every
// entry point catches every exception and turns it into SG_DCM_ERROR with
// a one-line message; nothing here prints (GDCM's warnings are off).
#include "io/dicom_gdcm.h"
#include "core/child.h"

#include <gdcmDataSet.h>
#include <gdcmFile.h>
#include <gdcmImage.h>
#include <gdcmImageReader.h>
#include <gdcmReader.h>
#include <gdcmSequenceOfItems.h>
#include <gdcmStringFilter.h>
#include <gdcmTrace.h>
#include <gdcmWriter.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace
{

void quiet()
{
    static std::once_flag once;
    std::call_once(once, [] {
        gdcm::Trace::SetDebug(false);
        gdcm::Trace::SetWarning(false);
        gdcm::Trace::SetError(false);
    });
}

void put(char *dst, size_t cap, const std::string &s)
{
    if (cap == 0)
        return;
    size_t n = 0;
    for (char c : s) {
        if (n + 1 >= cap)
            break;
        dst[n++] = (c >= 32 && c < 127) ? c : ' ';
    }
    while (n > 0 && (dst[n - 1] == ' ' || dst[n - 1] == '\0'))
        n--;
    dst[n] = '\0';
    size_t lead = 0;
    while (dst[lead] == ' ')
        lead++;
    if (lead)
        std::memmove(dst, dst + lead, n - lead + 1);
}

// The raw bytes of an element as text (DS, IS, UI, CS, LO: ASCII in any
// transfer syntax), or "" where it is absent, empty or a sequence.
std::string text_of(const gdcm::DataSet &ds, const gdcm::Tag &t)
{
    if (!ds.FindDataElement(t))
        return std::string();
    const gdcm::DataElement &de = ds.GetDataElement(t);
    const gdcm::ByteValue *bv = de.GetByteValue();
    if (!bv || !bv->GetPointer())
        return std::string();
    std::string s(bv->GetPointer(), bv->GetLength());
    size_t end = s.find('\0');
    if (end != std::string::npos)
        s.resize(end);
    return s;
}

// Up to n backslash-separated decimal numbers of a DS or IS element; the
// count found (0 where absent; -1 where malformed).
int numbers_of(const gdcm::DataSet &ds, const gdcm::Tag &t, double *out, int n)
{
    std::string s = text_of(ds, t);
    if (s.find_first_not_of(" ") == std::string::npos)
        return 0;
    int k = 0;
    size_t at = 0;
    while (k < n && at <= s.size()) {
        size_t end = s.find('\\', at);
        std::string part = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
        const char *p = part.c_str();
        char *stop = nullptr;
        double v = std::strtod(p, &stop);
        while (stop && *stop == ' ')
            stop++;
        if (stop == p || !stop || *stop != '\0' || !std::isfinite(v))
            return -1;
        out[k++] = v;
        if (end == std::string::npos)
            break;
        at = end + 1;
    }
    return k;
}

// An unsigned 16-bit value (US) through GDCM's string filter, which knows
// the VR and the byte order; -1 where absent or not a number.
long us_of(const gdcm::File &f, const gdcm::Tag &t)
{
    if (!f.GetDataSet().FindDataElement(t))
        return -1;
    gdcm::StringFilter sf;
    sf.SetFile(f);
    std::string s = sf.ToString(t);
    const char *p = s.c_str();
    char *stop = nullptr;
    long v = std::strtol(p, &stop, 10);
    if (stop == p)
        return -1;
    return v;
}

// The first item's data set of sequence t in ds, or nullptr.
const gdcm::DataSet *item_of(const gdcm::DataSet &ds, const gdcm::Tag &t, size_t index = 1)
{
    if (!ds.FindDataElement(t))
        return nullptr;
    gdcm::SmartPointer<gdcm::SequenceOfItems> sq = ds.GetDataElement(t).GetValueAsSQ();
    if (!sq || index < 1 || sq->GetNumberOfItems() < index)
        return nullptr;
    return &sq->GetItem(index).GetNestedDataSet();
}

// What a functional group (shared or one frame's) says.
struct group {
    int has_pos = 0, has_ori = 0, has_sp = 0, has_rs = 0;
    double pos[3] = {0, 0, 0}, ori[6] = {0, 0, 0, 0, 0, 0}, sp[2] = {0, 0}, rs[2] = {1, 0};
};

bool read_group(const gdcm::DataSet &g, group &out)
{
    if (const gdcm::DataSet *p = item_of(g, gdcm::Tag(0x0020, 0x9113))) {
        int k = numbers_of(*p, gdcm::Tag(0x0020, 0x0032), out.pos, 3);
        if (k != 3 && k != 0)
            return false;
        out.has_pos = k == 3;
    }
    if (const gdcm::DataSet *p = item_of(g, gdcm::Tag(0x0020, 0x9116))) {
        int k = numbers_of(*p, gdcm::Tag(0x0020, 0x0037), out.ori, 6);
        if (k != 6 && k != 0)
            return false;
        out.has_ori = k == 6;
    }
    if (const gdcm::DataSet *p = item_of(g, gdcm::Tag(0x0028, 0x9110))) {
        int k = numbers_of(*p, gdcm::Tag(0x0028, 0x0030), out.sp, 2);
        if (k != 2 && k != 0)
            return false;
        out.has_sp = k == 2;
    }
    if (const gdcm::DataSet *p = item_of(g, gdcm::Tag(0x0028, 0x9145))) {
        double s = 1, i = 0;
        int ks = numbers_of(*p, gdcm::Tag(0x0028, 0x1053), &s, 1);
        int ki = numbers_of(*p, gdcm::Tag(0x0028, 0x1052), &i, 1);
        if (ks < 0 || ki < 0)
            return false;
        if (ks == 1 || ki == 1) {
            out.has_rs = 1;
            out.rs[0] = ks == 1 ? s : 1;
            out.rs[1] = ki == 1 ? i : 0;
        }
    }
    return true;
}

int fail(char *err, size_t cap, const std::string &msg)
{
    put(err, cap, msg);
    return SG_DCM_ERROR;
}

int read_header(const char *path, sg_dcm_header *h, char *err, size_t cap)
{
    quiet();
    gdcm::Reader r;
    r.SetFileName(path);
    std::set<gdcm::Tag> skip;
    if (!r.ReadUpToTag(gdcm::Tag(0x7fe0, 0x0010), skip))
        return SG_DCM_NOT_DICOM;
    const gdcm::File &f = r.GetFile();
    const gdcm::DataSet &ds = f.GetDataSet();
    put(h->series_uid, sizeof h->series_uid, text_of(ds, gdcm::Tag(0x0020, 0x000e)));
    put(h->modality, sizeof h->modality, text_of(ds, gdcm::Tag(0x0008, 0x0060)));
    put(h->description, sizeof h->description, text_of(ds, gdcm::Tag(0x0008, 0x103e)));
    put(h->sop_class, sizeof h->sop_class, text_of(ds, gdcm::Tag(0x0008, 0x0016)));
    put(h->sop_instance, sizeof h->sop_instance, text_of(ds, gdcm::Tag(0x0008, 0x0018)));
    put(h->photometric, sizeof h->photometric, text_of(ds, gdcm::Tag(0x0028, 0x0004)));
    const char *ts = f.GetHeader().GetDataSetTransferSyntax().GetString();
    put(h->transfer_syntax, sizeof h->transfer_syntax, ts ? ts : "");
    h->has_pixels = ds.FindDataElement(gdcm::Tag(0x7fe0, 0x0010)) ? 1 : 0;
    long rows = us_of(f, gdcm::Tag(0x0028, 0x0010)), cols = us_of(f, gdcm::Tag(0x0028, 0x0011));
    long samples = us_of(f, gdcm::Tag(0x0028, 0x0002)), alloc = us_of(f, gdcm::Tag(0x0028, 0x0100));
    long stored = us_of(f, gdcm::Tag(0x0028, 0x0101)), rep = us_of(f, gdcm::Tag(0x0028, 0x0103));
    long planar = us_of(f, gdcm::Tag(0x0028, 0x0006));
    h->rows = rows > 0 && rows < 65536 ? (int32_t)rows : 0;
    h->cols = cols > 0 && cols < 65536 ? (int32_t)cols : 0;
    h->samples = samples > 0 && samples < 65536 ? (int32_t)samples : 1;
    h->bits_allocated = alloc > 0 && alloc < 65536 ? (int32_t)alloc : 0;
    h->bits_stored = stored > 0 && stored < 65536 ? (int32_t)stored : h->bits_allocated;
    h->pixel_representation = rep == 1 ? 1 : 0;
    h->planar = planar == 1 ? 1 : 0;
    double frames = 1;
    int kf = numbers_of(ds, gdcm::Tag(0x0028, 0x0008), &frames, 1);
    if (kf < 0 || (kf == 1 && (frames < 1 || frames > 1e6 || frames != std::floor(frames))))
        return fail(err, cap, "NumberOfFrames is not a count of frames");
    h->frames = (int32_t)frames;
    int k = numbers_of(ds, gdcm::Tag(0x0020, 0x0032), h->position, 3);
    if (k != 0 && k != 3)
        return fail(err, cap, "ImagePositionPatient is not 3 numbers");
    h->has_position = k == 3;
    k = numbers_of(ds, gdcm::Tag(0x0020, 0x0037), h->orientation, 6);
    if (k != 0 && k != 6)
        return fail(err, cap, "ImageOrientationPatient is not 6 numbers");
    h->has_orientation = k == 6;
    k = numbers_of(ds, gdcm::Tag(0x0028, 0x0030), h->spacing, 2);
    if (k != 0 && k != 2)
        return fail(err, cap, "PixelSpacing is not 2 numbers");
    h->has_spacing = k == 2;
    double s = 1, i = 0;
    int ks = numbers_of(ds, gdcm::Tag(0x0028, 0x1053), &s, 1);
    int ki = numbers_of(ds, gdcm::Tag(0x0028, 0x1052), &i, 1);
    if (ks < 0 || ki < 0)
        return fail(err, cap, "RescaleSlope or RescaleIntercept is not a number");
    h->has_rescale = ks == 1 || ki == 1;
    h->slope = ks == 1 ? s : 1;
    h->intercept = ki == 1 ? i : 0;
    if (numbers_of(ds, gdcm::Tag(0x0018, 0x0088), &h->spacing_between, 1) < 0)
        h->spacing_between = 0;
    if (numbers_of(ds, gdcm::Tag(0x0018, 0x0050), &h->thickness, 1) < 0)
        h->thickness = 0;

    // Enhanced multi-frame: the shared groups, then each frame's.
    group shared;
    const gdcm::DataSet *sh = item_of(ds, gdcm::Tag(0x5200, 0x9229));
    if (sh && !read_group(*sh, shared))
        return fail(err, cap, "a shared functional group is malformed");
    bool enhanced = sh != nullptr || ds.FindDataElement(gdcm::Tag(0x5200, 0x9230));
    if (enhanced) {
        size_t n = (size_t)h->frames;
        std::vector<group> per(n, shared);
        if (ds.FindDataElement(gdcm::Tag(0x5200, 0x9230))) {
            gdcm::SmartPointer<gdcm::SequenceOfItems> sq = ds.GetDataElement(gdcm::Tag(0x5200, 0x9230)).GetValueAsSQ();
            if (!sq || sq->GetNumberOfItems() != n)
                return fail(err, cap,
                            "PerFrameFunctionalGroupsSequence does not have one item per frame (NumberOfFrames " +
                                std::to_string(n) + ")");
            for (size_t j = 0; j < n; j++)
                if (!read_group(sq->GetItem(j + 1).GetNestedDataSet(), per[j]))
                    return fail(err, cap, "the functional groups of frame " + std::to_string(j + 1) + " are malformed");
        }
        bool pos = true, ori = true, rs = false;
        for (const group &g : per) {
            pos = pos && g.has_pos;
            ori = ori && g.has_ori;
            rs = rs || g.has_rs;
        }
        if (pos) {
            h->frame_position = (double *)std::malloc(sizeof(double) * 3 * n);
            if (!h->frame_position)
                return fail(err, cap, "out of memory");
            for (size_t j = 0; j < n; j++)
                std::memcpy(h->frame_position + 3 * j, per[j].pos, sizeof per[j].pos);
        }
        if (ori) {
            h->frame_orientation = (double *)std::malloc(sizeof(double) * 6 * n);
            if (!h->frame_orientation)
                return fail(err, cap, "out of memory");
            for (size_t j = 0; j < n; j++)
                std::memcpy(h->frame_orientation + 6 * j, per[j].ori, sizeof per[j].ori);
            if (!h->has_orientation) {
                std::memcpy(h->orientation, per[0].ori, sizeof per[0].ori);
                h->has_orientation = 1;
            }
        }
        if (rs) {
            h->frame_rescale = (double *)std::malloc(sizeof(double) * 2 * n);
            if (!h->frame_rescale)
                return fail(err, cap, "out of memory");
            for (size_t j = 0; j < n; j++)
                std::memcpy(h->frame_rescale + 2 * j, per[j].rs, sizeof per[j].rs);
        }
        if (!h->has_spacing && per.size() > 0 && per[0].has_sp) {
            std::memcpy(h->spacing, per[0].sp, sizeof per[0].sp);
            h->has_spacing = 1;
            for (const group &g : per)
                if (!g.has_sp || g.sp[0] != per[0].sp[0] || g.sp[1] != per[0].sp[1])
                    return fail(err, cap, "frames with different PixelSpacing");
        }
        if (pos && !h->has_position) {
            std::memcpy(h->position, per[0].pos, sizeof per[0].pos);
            h->has_position = 1;
        }
    } else if (h->frames > 1 && ds.FindDataElement(gdcm::Tag(0x3004, 0x000c))) {
        // RT Dose: frame k lies GridFrameOffsetVector[k] mm along the normal.
        size_t n = (size_t)h->frames;
        h->frame_offsets = (double *)std::malloc(sizeof(double) * n);
        if (!h->frame_offsets)
            return fail(err, cap, "out of memory");
        if (numbers_of(ds, gdcm::Tag(0x3004, 0x000c), h->frame_offsets, (int)n) != (int)n)
            return fail(err, cap, "GridFrameOffsetVector does not have one number per frame");
    }
    return SG_DCM_OK;
}

int decode(const char *path, const sg_dcm_header *h, void *dst, size_t bytes, int32_t *planar,
           char photometric[SG_DCM_TEXT], char *err, size_t cap)
{
    quiet();
    gdcm::ImageReader r;
    r.SetFileName(path);
    if (!r.Read())
        return fail(err, cap, "GDCM cannot read the file");
    const gdcm::Image &img = r.GetImage();
    const gdcm::PixelFormat &pf = img.GetPixelFormat();
    unsigned dims = img.GetNumberOfDimensions();
    unsigned frames = dims >= 3 ? img.GetDimension(2) : 1;
    if (img.GetDimension(0) != (unsigned)h->cols || img.GetDimension(1) != (unsigned)h->rows ||
        frames != (unsigned)h->frames || pf.GetSamplesPerPixel() != (unsigned)h->samples ||
        pf.GetBitsAllocated() != (unsigned)h->bits_allocated)
        return fail(err, cap,
                    "the pixel data is " + std::to_string(img.GetDimension(0)) + "x" +
                        std::to_string(img.GetDimension(1)) + "x" + std::to_string(frames) + " of " +
                        std::to_string(pf.GetSamplesPerPixel()) + " samples of " +
                        std::to_string(pf.GetBitsAllocated()) + " bits, not what the header says");
    if (img.GetBufferLength() != bytes)
        return fail(err, cap,
                    "the decoded pixels are " + std::to_string(img.GetBufferLength()) + " bytes, not " +
                        std::to_string(bytes));
    if (!img.GetBuffer(static_cast<char *>(dst)))
        return fail(err, cap,
                    std::string("GDCM cannot decode the pixel data (") + img.GetTransferSyntax().GetString() + ")");
    *planar = img.GetPlanarConfiguration() == 1 ? 1 : 0;
    const char *pi = gdcm::PhotometricInterpretation::GetPIString(img.GetPhotometricInterpretation());
    put(photometric, SG_DCM_TEXT, pi ? pi : "");
    return SG_DCM_OK;
}

/* GDCM 3.0 reads the File Meta Information (group 0002 after the
 * preamble's "DICM") with assertions, not errors, for what a damaged file
 * holds: a tag, a 32-bit length or a value cut off by the end of the file,
 * a sequence or an undefined length in the group. Debian builds them in,
 * so such a file would end the process: the group's elements are walked
 * here first, as GDCM will read them (explicit VR little endian), and a
 * file that would trip one is refused with what is wrong. Empty: none. */
std::string meta_problem(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return "";
    const long long size = (long long)sb.st_size;
    /* One that ends right after the preamble's "DICM" (132 bytes) or
     * before trips is.good() there. */
    if (size <= 132)
        return "the file ends at its DICOM preamble (" + std::to_string(size) + " bytes)";
    FILE *f = std::fopen(path, "rb");
    if (!f)
        return "";
    unsigned char b[12];
    std::string why;
    if (std::fread(b, 1, 4, f) == 4 && std::fseek(f, 128, SEEK_SET) == 0 && std::fread(b, 1, 4, f) == 4 &&
        std::memcmp(b, "DICM", 4) == 0) {
        for (long long at = 132; why.empty();) {
            if (at + 4 > size) {
                why = "the file ends inside its meta information, at byte " + std::to_string(at);
                break;
            }
            if (std::fseek(f, (long)at, SEEK_SET) != 0 || std::fread(b, 1, 6, f) < 4)
                break;
            unsigned group = b[0] | (unsigned)b[1] << 8;
            if (group != 0x0002)
                break; /* the data set: GDCM's own reading from here */
            if (at + 6 > size)
                break; /* GDCM stops on a VR it cannot read */
            const char vr[3] = {(char)b[4], (char)b[5], 0};
            static const char *const long_vrs[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ",
                                                   "SV", "UC", "UN", "UR", "UT", "UV"};
            static const char *const short_vrs[] = {"AE", "AS", "AT", "CS", "DA", "DS", "DT", "FL", "FD",
                                                    "IS", "LO", "LT", "PN", "SH", "SL", "SS", "ST", "TM",
                                                    "UI", "UL", "US"};
            bool is_long = false, known = false;
            for (const char *v : long_vrs)
                if (std::strcmp(v, vr) == 0)
                    is_long = known = true;
            for (const char *v : short_vrs)
                if (std::strcmp(v, vr) == 0)
                    known = true;
            if (!known)
                break; /* GDCM stops reading the group there */
            if (std::strcmp(vr, "SQ") == 0) {
                why = "its meta information holds a sequence";
                break;
            }
            long long head = is_long ? 12 : 8, len;
            if (at + head > size) {
                why = "the file ends inside its meta information, at byte " + std::to_string(at);
                break;
            }
            if (is_long) {
                if (std::fseek(f, (long)(at + 8), SEEK_SET) != 0 || std::fread(b, 1, 4, f) != 4)
                    break;
                len = (long long)(b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 | (unsigned long)b[3] << 24);
                if (len == 0xffffffffLL) {
                    why = "its meta information holds an element of undefined length";
                    break;
                }
            } else {
                if (std::fseek(f, (long)(at + 6), SEEK_SET) != 0 || std::fread(b, 1, 2, f) != 2)
                    break;
                len = b[0] | (long long)b[1] << 8;
            }
            if (at + head + len > size) {
                why = "the file ends inside its meta information, at byte " + std::to_string(at);
                break;
            }
            at += head + len;
        }
    }
    std::fclose(f);
    return why;
}

} // namespace

extern "C" int sg_dcm_read_header(const char *path, sg_dcm_header *h, char *err, size_t cap)
{
    std::memset(h, 0, sizeof *h);
    h->frames = 1;
    h->slope = 1;
    const std::string why = meta_problem(path);
    if (!why.empty())
        return fail(err, cap, why);
    int rc;
    try {
        rc = read_header(path, h, err, cap);
    } catch (const std::exception &e) {
        rc = fail(err, cap, std::string("GDCM: ") + e.what());
    } catch (...) {
        rc = fail(err, cap, "GDCM failed reading the header");
    }
    if (rc != SG_DCM_OK)
        sg_dcm_header_free(h);
    return rc;
}

extern "C" void sg_dcm_header_free(sg_dcm_header *h)
{
    if (!h)
        return;
    std::free(h->frame_position);
    std::free(h->frame_orientation);
    std::free(h->frame_rescale);
    std::free(h->frame_offsets);
    h->frame_position = h->frame_orientation = h->frame_rescale = h->frame_offsets = nullptr;
}

/* The decoding child's CPU time limit: 2 s, plus a second per 4 MiB of
 * pixels (JPEG 2000 through OpenJPEG, the slowest codec GDCM uses, decodes
 * tens of MiB a second on one core). */
static rlim_t decode_cpu_seconds(size_t bytes)
{
    return 2 + (rlim_t)(bytes >> 22);
}

/* A decoding child asleep this long without using CPU is taken for one
 * blocked on a lock it inherited (sg_child_wait), killed, and the decode
 * started again, up to DECODE_ATTEMPTS times in all. */
#define DECODE_STUCK_S 10.0
#define DECODE_ATTEMPTS 3

/* What a decoding child leaves for its parent, ahead of the pixels. */
struct decode_result {
    int rc;
    int32_t planar;
    char photometric[SG_DCM_TEXT];
    char err[512];
};

/* GDCM's image reader and codecs assert (abort the process) on malformed
 * files in more places than a check before them can foresee (fuzz_volume
 * kept finding new ones: JPEG header warnings, spacing from malformed
 * orientations, ...), and they print to stderr. So the pixels are decoded
 * in a child process, into memory shared with this one: a GDCM abort ends
 * the child alone and is reported as the file's error, and its messages go
 * nowhere. The cost is a fork per file decoded (the source keeps the last
 * files decoded). Some codecs also loop forever on a corrupt stream
 * (CharLS on a JPEG-LS scan, found by fuzz_volume), so the child has a CPU
 * time limit: far above what decoding the frame's bytes takes at the
 * slowest codec's pace, yet a few seconds for a small file. A child that
 * sleeps instead, on a lock another of this process's threads held at
 * the fork, is killed and the decode forked again (sg_child_wait). */
extern "C" int sg_dcm_decode(const char *path, const sg_dcm_header *h, void *dst, size_t bytes, int32_t *planar,
                             char photometric[SG_DCM_TEXT], char *err, size_t cap)
{
    size_t total = sizeof(decode_result) + bytes;
    void *shared = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return fail(err, cap, "no memory to decode the pixel data");
    decode_result *res = static_cast<decode_result *>(shared);
    char *pixels = static_cast<char *>(shared) + sizeof(decode_result);
    int status = 0;
    bool stuck = false;
    for (int attempt = 0; attempt < DECODE_ATTEMPTS && (attempt == 0 || stuck); attempt++) {
        res->rc = SG_DCM_ERROR;
        std::fflush(nullptr);
        pid_t pid = fork();
        if (pid < 0) {
            munmap(shared, total);
            return fail(err, cap, std::string("cannot start the decoder: ") + std::strerror(errno));
        }
        if (pid == 0) {
            /* The child: default signal dispositions (a fuzzer's or sanitizer's
             * handlers would report GDCM's abort as this process's), stderr
             * to /dev/null, and _exit (no atexit handlers, no leak checks). */
            for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGXCPU})
                std::signal(sig, SIG_DFL);
            const rlim_t seconds = decode_cpu_seconds(bytes);
            const struct rlimit cpu = {seconds, seconds + 1};
            setrlimit(RLIMIT_CPU, &cpu);
            int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (null >= 0)
                dup2(null, 2);
            int rc;
            try {
                rc = decode(path, h, pixels, bytes, &res->planar, res->photometric, res->err, sizeof res->err);
            } catch (const std::exception &e) {
                rc = fail(res->err, sizeof res->err, std::string("GDCM: ") + e.what());
            } catch (...) {
                rc = fail(res->err, sizeof res->err, "GDCM failed decoding the pixel data");
            }
            res->rc = rc;
            _exit(0);
        }
        if (sg_child_wait(pid, DECODE_STUCK_S, &status, &stuck) != 0) {
            if (errno != ECHILD) {
                int e = errno;
                kill(pid, SIGKILL);
                waitpid(pid, nullptr, 0);
                munmap(shared, total);
                return fail(err, cap, std::string("cannot wait for the decoder: ") + std::strerror(e));
            }
            status = 0; /* reaped already (SIGCHLD ignored): what it left in res says how it went */
        }
    }
    if (stuck) {
        munmap(shared, total);
        return fail(err, cap,
                    "GDCM's decoder stopped (asleep, using no CPU, " + std::to_string((int)DECODE_STUCK_S) +
                        " s) " + std::to_string(DECODE_ATTEMPTS) + " times");
    }
    int rc;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGXCPU || WTERMSIG(status) == SIGKILL))
            rc = fail(err, cap,
                      "GDCM's decoder did not finish the pixel data in " +
                          std::to_string((unsigned long long)decode_cpu_seconds(bytes)) +
                          " s of CPU time (a corrupt compressed stream)");
        else
            rc = fail(err, cap,
                      WIFSIGNALED(status)
                          ? "GDCM failed on the pixel data (its decoder ended on signal " +
                                std::to_string(WTERMSIG(status)) + ")"
                          : std::string("GDCM failed on the pixel data (its decoder exited with status ") +
                                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
    } else if (res->rc != SG_DCM_OK) {
        res->err[sizeof res->err - 1] = 0;
        rc = fail(err, cap, res->err);
    } else {
        std::memcpy(dst, pixels, bytes);
        *planar = res->planar;
        std::memcpy(photometric, res->photometric, SG_DCM_TEXT);
        photometric[SG_DCM_TEXT - 1] = 0;
        rc = SG_DCM_OK;
    }
    munmap(shared, total);
    return rc;
}

// --- the study a SEG copies, and the SEG's encoder ---------------------------

namespace
{

// A text value as the file has it (any byte but NUL and control characters
// other than ESC, which ISO 2022 character sets use), trailing spaces gone.
void put_raw(char *dst, size_t cap, const std::string &s)
{
    size_t n = 0;
    for (char c : s) {
        if (n + 1 >= cap)
            break;
        unsigned char u = (unsigned char)c;
        dst[n++] = (u >= 32 || u == 0x1b) ? c : ' ';
    }
    while (n > 0 && dst[n - 1] == ' ')
        n--;
    dst[n] = '\0';
}

int read_study(const char *path, sg_dcm_study *o, char *err, size_t cap)
{
    quiet();
    gdcm::Reader r;
    r.SetFileName(path);
    std::set<gdcm::Tag> skip;
    if (!r.ReadUpToTag(gdcm::Tag(0x7fe0, 0x0010), skip))
        return fail(err, cap, "GDCM cannot read the header");
    const gdcm::DataSet &ds = r.GetFile().GetDataSet();
    put(o->study_uid, sizeof o->study_uid, text_of(ds, gdcm::Tag(0x0020, 0x000d)));
    put(o->series_uid, sizeof o->series_uid, text_of(ds, gdcm::Tag(0x0020, 0x000e)));
    put(o->frame_of_reference, sizeof o->frame_of_reference, text_of(ds, gdcm::Tag(0x0020, 0x0052)));
    put(o->charset, sizeof o->charset, text_of(ds, gdcm::Tag(0x0008, 0x0005)));
    put_raw(o->patient_name, sizeof o->patient_name, text_of(ds, gdcm::Tag(0x0010, 0x0010)));
    put_raw(o->patient_id, sizeof o->patient_id, text_of(ds, gdcm::Tag(0x0010, 0x0020)));
    put(o->birth_date, sizeof o->birth_date, text_of(ds, gdcm::Tag(0x0010, 0x0030)));
    put(o->sex, sizeof o->sex, text_of(ds, gdcm::Tag(0x0010, 0x0040)));
    put(o->study_date, sizeof o->study_date, text_of(ds, gdcm::Tag(0x0008, 0x0020)));
    put(o->study_time, sizeof o->study_time, text_of(ds, gdcm::Tag(0x0008, 0x0030)));
    put_raw(o->study_id, sizeof o->study_id, text_of(ds, gdcm::Tag(0x0020, 0x0010)));
    put_raw(o->accession, sizeof o->accession, text_of(ds, gdcm::Tag(0x0008, 0x0050)));
    put_raw(o->referring, sizeof o->referring, text_of(ds, gdcm::Tag(0x0008, 0x0090)));
    return SG_DCM_OK;
}

// Element helpers: values padded to an even length as PS3.5 wants (UI
// with NUL, text with a space, bytes with a zero).
void el(gdcm::DataSet &ds, uint16_t g, uint16_t e, gdcm::VR vr, std::string v)
{
    if (v.size() % 2)
        v.push_back(vr == gdcm::VR::UI || vr == gdcm::VR::OB ? '\0' : ' ');
    gdcm::DataElement de(gdcm::Tag(g, e));
    de.SetVR(vr);
    de.SetByteValue(v.data(), (uint32_t)v.size());
    ds.Replace(de);
}

void el_us(gdcm::DataSet &ds, uint16_t g, uint16_t e, unsigned v)
{
    char b[2] = {(char)(v & 0xff), (char)(v >> 8 & 0xff)};
    el(ds, g, e, gdcm::VR::US, std::string(b, 2));
}

void el_at(gdcm::DataSet &ds, uint16_t g, uint16_t e, uint16_t tg, uint16_t te)
{
    char b[4] = {(char)(tg & 0xff), (char)(tg >> 8), (char)(te & 0xff), (char)(te >> 8)};
    el(ds, g, e, gdcm::VR::AT, std::string(b, 4));
}

void el_ul2(gdcm::DataSet &ds, uint16_t g, uint16_t e, uint32_t a, uint32_t b)
{
    char v[8];
    for (int i = 0; i < 4; i++) {
        v[i] = (char)(a >> (8 * i) & 0xff);
        v[4 + i] = (char)(b >> (8 * i) & 0xff);
    }
    el(ds, g, e, gdcm::VR::UL, std::string(v, 8));
}

// A decimal string of at most 16 characters (DS's limit).
std::string ds_num(double v)
{
    char b[64];
    for (int p = 15; p > 0; p--) {
        std::snprintf(b, sizeof b, "%.*g", p, v);
        if (std::strlen(b) <= 16)
            break;
    }
    return b;
}

std::string ds_list(const double *v, int n)
{
    std::string s;
    for (int i = 0; i < n; i++)
        s += (i ? "\\" : "") + ds_num(v[i]);
    return s;
}

// A sequence of undefined length in ds; items are added to the returned
// pointer (the element shares it).
gdcm::SmartPointer<gdcm::SequenceOfItems> seq(gdcm::DataSet &ds, uint16_t g, uint16_t e)
{
    gdcm::SmartPointer<gdcm::SequenceOfItems> sq = new gdcm::SequenceOfItems;
    sq->SetLengthToUndefined();
    gdcm::DataElement de(gdcm::Tag(g, e));
    de.SetVR(gdcm::VR::SQ);
    de.SetValue(*sq);
    de.SetVLToUndefined();
    ds.Replace(de);
    return sq;
}

gdcm::Item item()
{
    gdcm::Item it;
    it.SetVLToUndefined();
    return it;
}

// One code sequence item (CodeValue, CodingSchemeDesignator, CodeMeaning).
void code(gdcm::DataSet &ds, uint16_t g, uint16_t e, const char *value, const char *scheme, const char *meaning)
{
    gdcm::SmartPointer<gdcm::SequenceOfItems> sq = seq(ds, g, e);
    gdcm::Item it = item();
    gdcm::DataSet &c = it.GetNestedDataSet();
    el(c, 0x0008, 0x0100, gdcm::VR::SH, value);
    el(c, 0x0008, 0x0102, gdcm::VR::SH, scheme);
    el(c, 0x0008, 0x0104, gdcm::VR::LO, meaning);
    sq->AddItem(it);
}

int encode_seg(const sg_dcm_seg *s, uint8_t **out, size_t *size, char *err, size_t cap)
{
    quiet();
    const sg_dcm_study *st = s->study;
    gdcm::Writer w;
    gdcm::File &f = w.GetFile();
    f.GetHeader().SetDataSetTransferSyntax(gdcm::TransferSyntax::ExplicitVRLittleEndian);
    gdcm::DataSet &ds = f.GetDataSet();
    if (st->charset[0])
        el(ds, 0x0008, 0x0005, gdcm::VR::CS, st->charset);
    el(ds, 0x0008, 0x0008, gdcm::VR::CS, "DERIVED\\PRIMARY");
    el(ds, 0x0008, 0x0012, gdcm::VR::DA, s->content_date);
    el(ds, 0x0008, 0x0013, gdcm::VR::TM, s->content_time);
    el(ds, 0x0008, 0x0016, gdcm::VR::UI, "1.2.840.10008.5.1.4.1.1.66.4");
    el(ds, 0x0008, 0x0018, gdcm::VR::UI, s->sop_uid);
    el(ds, 0x0008, 0x0020, gdcm::VR::DA, st->study_date);
    el(ds, 0x0008, 0x0023, gdcm::VR::DA, s->content_date);
    el(ds, 0x0008, 0x0030, gdcm::VR::TM, st->study_time);
    el(ds, 0x0008, 0x0033, gdcm::VR::TM, s->content_time);
    el(ds, 0x0008, 0x0050, gdcm::VR::SH, st->accession);
    el(ds, 0x0008, 0x0060, gdcm::VR::CS, "SEG");
    el(ds, 0x0008, 0x0070, gdcm::VR::LO, "segrt");
    el(ds, 0x0008, 0x0090, gdcm::VR::PN, st->referring);
    el(ds, 0x0008, 0x103e, gdcm::VR::LO, "segrt segmentation");
    el(ds, 0x0008, 0x1090, gdcm::VR::LO, "segrt");
    {
        // The source series and each of its instances (a multi-frame file once).
        gdcm::SmartPointer<gdcm::SequenceOfItems> rs = seq(ds, 0x0008, 0x1115);
        gdcm::Item it = item();
        gdcm::DataSet &r = it.GetNestedDataSet();
        gdcm::SmartPointer<gdcm::SequenceOfItems> ri = seq(r, 0x0008, 0x114a);
        std::set<std::string> seen;
        for (int64_t k = 0; k < s->n_slices; k++) {
            const sg_dcm_slice_ref &ref = s->slices[k];
            if (!seen.insert(ref.sop_instance).second)
                continue;
            gdcm::Item ii = item();
            el(ii.GetNestedDataSet(), 0x0008, 0x1150, gdcm::VR::UI, ref.sop_class);
            el(ii.GetNestedDataSet(), 0x0008, 0x1155, gdcm::VR::UI, ref.sop_instance);
            ri->AddItem(ii);
        }
        el(r, 0x0020, 0x000e, gdcm::VR::UI, st->series_uid);
        rs->AddItem(it);
    }
    el(ds, 0x0010, 0x0010, gdcm::VR::PN, st->patient_name);
    el(ds, 0x0010, 0x0020, gdcm::VR::LO, st->patient_id);
    el(ds, 0x0010, 0x0030, gdcm::VR::DA, st->birth_date);
    el(ds, 0x0010, 0x0040, gdcm::VR::CS, st->sex);
    el(ds, 0x0018, 0x1000, gdcm::VR::LO, "1");
    el(ds, 0x0018, 0x1020, gdcm::VR::LO, s->software);
    el(ds, 0x0020, 0x000d, gdcm::VR::UI, st->study_uid);
    el(ds, 0x0020, 0x000e, gdcm::VR::UI, s->series_uid);
    el(ds, 0x0020, 0x0010, gdcm::VR::SH, st->study_id);
    el(ds, 0x0020, 0x0011, gdcm::VR::IS, "9001");
    el(ds, 0x0020, 0x0013, gdcm::VR::IS, "1");
    if (st->frame_of_reference[0]) { // the module goes with the source's: a SEG has no frame of its own
        el(ds, 0x0020, 0x0052, gdcm::VR::UI, st->frame_of_reference);
        el(ds, 0x0020, 0x1040, gdcm::VR::LO, "");
    }
    {
        gdcm::SmartPointer<gdcm::SequenceOfItems> dorg = seq(ds, 0x0020, 0x9221);
        gdcm::Item it = item();
        el(it.GetNestedDataSet(), 0x0020, 0x9164, gdcm::VR::UI, s->dimension_uid);
        dorg->AddItem(it);
        // Frames are indexed by segment, then by position along the normal.
        gdcm::SmartPointer<gdcm::SequenceOfItems> dix = seq(ds, 0x0020, 0x9222);
        const uint16_t ptr[2][4] = {{0x0062, 0x000b, 0x0062, 0x000a}, {0x0020, 0x0032, 0x0020, 0x9113}};
        const char *label[2] = {"Referenced Segment Number", "Image Position Patient"};
        for (int d = 0; d < 2; d++) {
            gdcm::Item di = item();
            gdcm::DataSet &x = di.GetNestedDataSet();
            el(x, 0x0020, 0x9164, gdcm::VR::UI, s->dimension_uid);
            el_at(x, 0x0020, 0x9165, ptr[d][0], ptr[d][1]);
            el_at(x, 0x0020, 0x9167, ptr[d][2], ptr[d][3]);
            el(x, 0x0020, 0x9421, gdcm::VR::LO, label[d]);
            dix->AddItem(di);
        }
        el(ds, 0x0020, 0x9311, gdcm::VR::CS, "3D");
    }
    el_us(ds, 0x0028, 0x0002, 1);
    el(ds, 0x0028, 0x0004, gdcm::VR::CS, "MONOCHROME2");
    el(ds, 0x0028, 0x0008, gdcm::VR::IS, std::to_string(s->n_frames));
    el_us(ds, 0x0028, 0x0010, (unsigned)s->rows);
    el_us(ds, 0x0028, 0x0011, (unsigned)s->cols);
    el_us(ds, 0x0028, 0x0100, 1);
    el_us(ds, 0x0028, 0x0101, 1);
    el_us(ds, 0x0028, 0x0102, 0);
    el_us(ds, 0x0028, 0x0103, 0);
    el(ds, 0x0028, 0x2110, gdcm::VR::CS, "00");
    el(ds, 0x0062, 0x0001, gdcm::VR::CS, "BINARY");
    el(ds, 0x0062, 0x0013, gdcm::VR::CS, "NO"); // one label map: segments never overlap
    {
        gdcm::SmartPointer<gdcm::SequenceOfItems> segs = seq(ds, 0x0062, 0x0002);
        for (int32_t k = 0; k < s->n_segments; k++) {
            gdcm::Item it = item();
            gdcm::DataSet &x = it.GetNestedDataSet();
            // A label without a vocabulary: category and type "Tissue".
            code(x, 0x0062, 0x0003, "85756007", "SCT", "Tissue");
            el_us(x, 0x0062, 0x0004, (unsigned)(k + 1));
            el(x, 0x0062, 0x0005, gdcm::VR::LO, s->labels[k]);
            el(x, 0x0062, 0x0006, gdcm::VR::ST, s->descriptions[k]);
            {
                gdcm::SmartPointer<gdcm::SequenceOfItems> alg = seq(x, 0x0062, 0x0007);
                gdcm::Item ai = item();
                gdcm::DataSet &a = ai.GetNestedDataSet();
                code(a, 0x0066, 0x002f, "123109", "DCM", "Artificial Intelligence");
                el(a, 0x0066, 0x0031, gdcm::VR::LO, s->software);
                el(a, 0x0066, 0x0036, gdcm::VR::LO, "segrt");
                alg->AddItem(ai);
            }
            el(x, 0x0062, 0x0008, gdcm::VR::CS, "AUTOMATIC");
            el(x, 0x0062, 0x0009, gdcm::VR::LO, "segrt");
            code(x, 0x0062, 0x000f, "85756007", "SCT", "Tissue");
            segs->AddItem(it);
        }
    }
    el(ds, 0x0070, 0x0080, gdcm::VR::CS, "SEGRT");
    el(ds, 0x0070, 0x0081, gdcm::VR::LO, "segrt segmentation");
    el(ds, 0x0070, 0x0084, gdcm::VR::PN, "segrt");
    {
        gdcm::SmartPointer<gdcm::SequenceOfItems> sh = seq(ds, 0x5200, 0x9229);
        gdcm::Item it = item();
        gdcm::DataSet &x = it.GetNestedDataSet();
        gdcm::SmartPointer<gdcm::SequenceOfItems> po = seq(x, 0x0020, 0x9116);
        gdcm::Item pi = item();
        el(pi.GetNestedDataSet(), 0x0020, 0x0037, gdcm::VR::DS, ds_list(s->orientation, 6));
        po->AddItem(pi);
        gdcm::SmartPointer<gdcm::SequenceOfItems> pm = seq(x, 0x0028, 0x9110);
        gdcm::Item mi = item();
        double thick = s->thickness > 0 ? s->thickness : s->slice_step;
        el(mi.GetNestedDataSet(), 0x0018, 0x0050, gdcm::VR::DS, ds_num(thick));
        el(mi.GetNestedDataSet(), 0x0018, 0x0088, gdcm::VR::DS, ds_num(s->slice_step));
        el(mi.GetNestedDataSet(), 0x0028, 0x0030, gdcm::VR::DS, ds_list(s->pixel_spacing, 2));
        pm->AddItem(mi);
        sh->AddItem(it);
    }
    {
        gdcm::SmartPointer<gdcm::SequenceOfItems> pf = seq(ds, 0x5200, 0x9230);
        for (int64_t fr = 0; fr < s->n_frames; fr++) {
            int64_t k = s->frame_slice[fr];
            if (k < 0 || k >= s->n_slices || s->frame_segment[fr] < 1 || s->frame_segment[fr] > s->n_segments)
                return fail(err, cap, "a frame refers to no slice or segment");
            const sg_dcm_slice_ref &ref = s->slices[k];
            gdcm::Item it = item();
            gdcm::DataSet &x = it.GetNestedDataSet();
            {
                gdcm::SmartPointer<gdcm::SequenceOfItems> der = seq(x, 0x0008, 0x9124);
                gdcm::Item di = item();
                gdcm::DataSet &d = di.GetNestedDataSet();
                gdcm::SmartPointer<gdcm::SequenceOfItems> src = seq(d, 0x0008, 0x2112);
                gdcm::Item si = item();
                gdcm::DataSet &sd = si.GetNestedDataSet();
                el(sd, 0x0008, 0x1150, gdcm::VR::UI, ref.sop_class);
                el(sd, 0x0008, 0x1155, gdcm::VR::UI, ref.sop_instance);
                if (ref.frame > 0)
                    el(sd, 0x0008, 0x1160, gdcm::VR::IS, std::to_string(ref.frame));
                // SpatialLocationsPreserved: readers (highdicom) index frames by source slice only where YES.
                el(sd, 0x0028, 0x135a, gdcm::VR::CS, s->frame_moved && s->frame_moved[fr] ? "NO" : "YES");
                code(sd, 0x0040, 0xa170, "121322", "DCM", "Source image for image processing operation");
                src->AddItem(si);
                code(d, 0x0008, 0x9215, "113076", "DCM", "Segmentation");
                der->AddItem(di);
            }
            {
                gdcm::SmartPointer<gdcm::SequenceOfItems> fc = seq(x, 0x0020, 0x9111);
                gdcm::Item ci = item();
                el_ul2(ci.GetNestedDataSet(), 0x0020, 0x9157, (uint32_t)s->frame_segment[fr], (uint32_t)(k + 1));
                fc->AddItem(ci);
                gdcm::SmartPointer<gdcm::SequenceOfItems> pp = seq(x, 0x0020, 0x9113);
                gdcm::Item pi = item();
                el(pi.GetNestedDataSet(), 0x0020, 0x0032, gdcm::VR::DS, ds_list(ref.position, 3));
                pp->AddItem(pi);
                gdcm::SmartPointer<gdcm::SequenceOfItems> si = seq(x, 0x0062, 0x000a);
                gdcm::Item ii = item();
                el_us(ii.GetNestedDataSet(), 0x0062, 0x000b, (unsigned)s->frame_segment[fr]);
                si->AddItem(ii);
            }
            pf->AddItem(it);
        }
    }
    el(ds, 0x7fe0, 0x0010, gdcm::VR::OB, std::string((const char *)s->pixels, s->pixel_bytes));
    std::ostringstream os;
    w.SetStream(os);
    if (!w.Write())
        return fail(err, cap, "GDCM could not write the Segmentation");
    std::string bytes = os.str();
    *out = (uint8_t *)std::malloc(bytes.size() ? bytes.size() : 1);
    if (!*out)
        return fail(err, cap, "out of memory");
    std::memcpy(*out, bytes.data(), bytes.size());
    *size = bytes.size();
    return SG_DCM_OK;
}

} // namespace

extern "C" int sg_dcm_read_study(const char *path, sg_dcm_study *out, char *err, size_t cap)
{
    std::memset(out, 0, sizeof *out);
    const std::string why = meta_problem(path);
    if (!why.empty())
        return fail(err, cap, why);
    try {
        return read_study(path, out, err, cap);
    } catch (const std::exception &e) {
        return fail(err, cap, std::string("GDCM: ") + e.what());
    } catch (...) {
        return fail(err, cap, "GDCM failed reading the header");
    }
}

extern "C" int sg_dcm_seg_encode(const sg_dcm_seg *s, uint8_t **out, size_t *size, char *err, size_t cap)
{
    *out = nullptr;
    *size = 0;
    try {
        return encode_seg(s, out, size, err, cap);
    } catch (const std::exception &e) {
        std::free(*out);
        *out = nullptr;
        return fail(err, cap, std::string("GDCM: ") + e.what());
    } catch (...) {
        std::free(*out);
        *out = nullptr;
        return fail(err, cap, "GDCM failed writing the Segmentation");
    }
}
