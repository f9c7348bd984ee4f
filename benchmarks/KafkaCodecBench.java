import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.DefaultRecordBatch;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.kafka.common.utils.Utils;

/**
 * The kafka-clients side of benchmarks/codec_bench.py: encode and decode throughput of Apache kafka-clients'
 * own record classes on the workload files that codec_bench.py writes, so both sides see the same records
 * and decode the same bytes.
 *
 * <p>Encode is what a producer does: one MemoryRecordsBuilder per batch (magic 2, CreateTime), record by
 * record. Decode is what a consumer does: ensureValid() (the CRC) on each batch, then its streaming
 * iterator with key and value copied into byte arrays, as the consumer's fetcher does before
 * deserializing.
 *
 * <p>One long-lived process that takes commands on stdin, one a line, and answers each with one JSON line,
 * so that codec_bench.py can interleave the two sides' timed passes (a kafka-clients pass, a klake pass, a
 * kafka-clients pass, ...) on the same pinned core: both then see the same machine, which a loaded shared
 * machine changes from minute to minute. The JIT stays warm between commands.
 * <ul>
 * <li>{@code warm CODEC VALUE_SIZE OP MS}: passes of OP (decode or encode) for at least MS ms and 3 passes
 * (JIT warm-up); answers {"warm_passes": n}.
 * <li>{@code run CODEC VALUE_SIZE OP}: one timed pass; answers {"cpu_ns", "wall_ns", "records", "bytes"}: this
 * thread's CPU time (which leaves out time the shared machine gave to other work, and the serial
 * collector's pauses, which run on the VM thread: the conservative side for klake) and the wall clock.
 * <li>{@code dump CODEC VALUE_SIZE PATH}: writes kafka-clients' own encoded batches to PATH (for klake to
 * decode them); answers {"bytes": n}.
 * </ul>
 * CODEC is the codec id. Before the first command it prints {"jvm": ...} once, then a {"check": ...} line per
 * correctness check (decoded records equal the input; uncompressed batches equal klake's bytes; compressed ones
 * decode back to the input), then {"ready": true}. A failed check or a Java exception is reported as a
 * check (and that cell is not timed), never a crash; an unknown command answers {"error": ...}.
 *
 * <p>Workload file (big-endian): "KLBENCH1", int32 value size, int32 records per batch, int32 record count
 * n, int32[n] key lengths, key bytes, int32[n] value lengths, value bytes, int64[n] timestamps, int32
 * codec count, then per codec: int32 codec id, int32 length, klake's encoded batches back to back.
 *
 * <p>Run: java -cp "$(.venv/bin/python -c 'from tests.oracles import fetch_jvm; print(fetch_jvm.classpath("kafka"))')" benchmarks/KafkaCodecBench.java FILE... (commands on stdin)
 */
public final class KafkaCodecBench {
    private static final byte[] MAGIC = "KLBENCH1".getBytes();
    /** Keeps the JIT from discarding work whose result is otherwise unused. */
    private static long blackhole;
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    private record Workload(int valueSize, int batchRecords, byte[][] keys, byte[][] values, long[] timestamps,
                            Map<Integer, byte[]> encoded) {
        int size() {
            return keys.length;
        }
    }

    /** One (codec, value size): its workload, klake's bytes and what kafka-clients' passes need. */
    private record Cell(Workload w, Compression compression, int[] capacities, ByteBuffer input,
                        BufferSupplier supplier, byte[] ownBytes, boolean decodeOk, boolean encodeOk) {
        LongSupplier pass(String op) {
            return switch (op) {
                case "decode" -> decodeOk ? () -> decode(input, supplier) : null;
                case "encode" -> encodeOk ? () -> encode(w, compression, capacities, null) : null;
                default -> null;
            };
        }
    }

    public static void main(String[] args) throws IOException {
        List<Path> files = new ArrayList<>();
        for (String arg : args) {
            files.add(Path.of(arg));
        }
        String gc = String.join("+", ManagementFactory.getGarbageCollectorMXBeans().stream()
                .map(java.lang.management.GarbageCollectorMXBean::getName).toList());
        System.out.println(String.format(Locale.ROOT, "{\"jvm\":\"%s %s\",\"cpus\":%d,\"gc\":\"%s\",\"max_heap_mb\":%d}",
                json(System.getProperty("java.vm.name")), json(System.getProperty("java.version")),
                Runtime.getRuntime().availableProcessors(), json(gc), Runtime.getRuntime().maxMemory() >> 20));
        Map<String, Cell> cells = new LinkedHashMap<>();
        for (Path file : files) {
            Workload w = read(file);
            for (Map.Entry<Integer, byte[]> e : w.encoded().entrySet()) {
                cells.put(e.getKey() + " " + w.valueSize(), cell(w, e.getKey(), e.getValue()));
            }
        }
        System.out.println("{\"ready\":true}");
        System.out.flush();
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = commands.readLine(); line != null; line = commands.readLine()) {
            System.out.println(answer(cells, line.trim().split(" +")));
            System.out.flush();
        }
        for (Cell cell : cells.values()) {
            cell.supplier().close();
        }
    }

    private static String answer(Map<String, Cell> cells, String[] command) throws IOException {
        Cell cell = command.length >= 4 ? cells.get(command[1] + " " + command[2]) : null;
        if (cell == null) {
            return "{\"error\":\"unknown command or cell: " + json(String.join(" ", command)) + "\"}";
        }
        switch (command[0]) {
            case "dump" -> {
                Files.write(Path.of(command[3]), cell.ownBytes());
                return "{\"bytes\":" + cell.ownBytes().length + "}";
            }
            case "warm", "run" -> {
                LongSupplier pass = cell.pass(command[3]);
                if (pass == null) {
                    return "{\"error\":\"no " + json(command[3]) + " pass for this cell (a check failed)\"}";
                }
                if (command[0].equals("warm")) {
                    long warmupNanos = command.length > 4 ? Long.parseLong(command[4]) * 1_000_000L : 0;
                    long start = System.nanoTime();
                    int passes = 0;
                    while (passes < 3 || System.nanoTime() - start < warmupNanos) {
                        blackhole += pass.getAsLong();
                        passes++;
                    }
                    return "{\"warm_passes\":" + passes + "}";
                }
                long c0 = THREADS.getCurrentThreadCpuTime();
                long t0 = System.nanoTime();
                blackhole += pass.getAsLong();
                long wall = System.nanoTime() - t0;
                long cpu = THREADS.getCurrentThreadCpuTime() - c0;
                long bytes = command[3].equals("decode") ? cell.input().remaining() : cell.ownBytes().length;
                return String.format(Locale.ROOT, "{\"cpu_ns\":%d,\"wall_ns\":%d,\"records\":%d,\"bytes\":%d}",
                        cpu, wall, cell.w().size(), bytes);
            }
            default -> {
                return "{\"error\":\"unknown command: " + json(command[0]) + "\"}";
            }
        }
    }

    private static Workload read(Path file) throws IOException {
        try (InputStream raw = Files.newInputStream(file);
             DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(raw, 1 << 20))) {
            byte[] magic = in.readNBytes(MAGIC.length);
            if (!Arrays.equals(magic, MAGIC)) {
                throw new IOException(file + " is not a codec_bench workload file");
            }
            int valueSize = in.readInt();
            int batchRecords = in.readInt();
            int n = in.readInt();
            byte[][] keys = readColumn(in, n);
            byte[][] values = readColumn(in, n);
            long[] timestamps = new long[n];
            for (int i = 0; i < n; i++) {
                timestamps[i] = in.readLong();
            }
            Map<Integer, byte[]> encoded = new LinkedHashMap<>();
            int codecs = in.readInt();
            for (int c = 0; c < codecs; c++) {
                int codec = in.readInt();
                encoded.put(codec, in.readNBytes(in.readInt()));
            }
            return new Workload(valueSize, batchRecords, keys, values, timestamps, encoded);
        }
    }

    private static byte[][] readColumn(DataInputStream in, int n) throws IOException {
        int[] lengths = new int[n];
        for (int i = 0; i < n; i++) {
            lengths[i] = in.readInt();
        }
        byte[][] column = new byte[n][];
        for (int i = 0; i < n; i++) {
            column[i] = lengths[i] < 0 ? null : in.readNBytes(lengths[i]);
        }
        return column;
    }

    /** Checks both directions for one (codec, value size) and keeps what its timed passes need. */
    private static Cell cell(Workload w, int codecId, byte[] klakeBytes) {
        CompressionType type = CompressionType.forId(codecId);
        Compression compression = Compression.of(type).build();
        String where = String.format(Locale.ROOT, "\"codec\":\"%s\",\"value_size\":%d", type.name, w.valueSize());
        int[] capacities = capacities(w);
        ByteBuffer input = ByteBuffer.wrap(klakeBytes);
        BufferSupplier supplier = BufferSupplier.create();
        boolean decodeOk = false;
        boolean encodeOk = false;
        byte[] own = new byte[0];
        try {
            decodeOk = check(where, "decode", verify(w, input, supplier));
            List<ByteBuffer> built = new ArrayList<>();
            long encodedBytes = encode(w, compression, capacities, built);
            ByteBuffer ours = concat(built, encodedBytes);
            own = ours.array();
            String roundTrip = type == CompressionType.NONE ? sameBytes(own, klakeBytes) : verify(w, ours, supplier);
            encodeOk = check(where, "encode", roundTrip);
        } catch (RuntimeException e) {
            check(where, "run", e.toString());
        }
        return new Cell(w, compression, capacities, input, supplier, own, decodeOk, encodeOk);
    }

    /** Prints a check line; a null problem is a pass. */
    private static boolean check(String where, String what, String problem) {
        System.out.println(String.format(Locale.ROOT, "{\"check\":\"%s\",%s,\"ok\":%b,\"detail\":\"%s\"}", what, where,
                problem == null, problem == null ? "" : json(problem)));
        return problem == null;
    }

    /** Output buffer per batch, sized for the uncompressed records so that no builder has to grow it. */
    private static int[] capacities(Workload w) {
        int batches = (w.size() + w.batchRecords() - 1) / w.batchRecords();
        int[] capacities = new int[batches];
        for (int i = 0; i < w.size(); i++) {
            int payload = (w.keys()[i] == null ? 0 : w.keys()[i].length) + (w.values()[i] == null ? 0 : w.values()[i].length);
            capacities[i / w.batchRecords()] += payload + 32;  // 32 >= a v2 record's framing without headers
        }
        for (int b = 0; b < batches; b++) {
            capacities[b] += DefaultRecordBatch.RECORD_BATCH_OVERHEAD;
        }
        return capacities;
    }

    /** One builder per batch; base offsets run on as in klake's encode_batches. Returns the bytes written. */
    private static long encode(Workload w, Compression compression, int[] capacities, List<ByteBuffer> out) {
        long bytes = 0;
        for (int start = 0, b = 0; start < w.size(); start += w.batchRecords(), b++) {
            int end = Math.min(start + w.batchRecords(), w.size());
            MemoryRecordsBuilder builder = MemoryRecords.builder(ByteBuffer.allocate(capacities[b]),
                    RecordBatch.MAGIC_VALUE_V2, compression, TimestampType.CREATE_TIME, start);
            for (int i = start; i < end; i++) {
                builder.append(w.timestamps()[i], w.keys()[i], w.values()[i]);
            }
            MemoryRecords records = builder.build();
            bytes += records.sizeInBytes();
            if (out != null) {
                out.add(records.buffer());
            }
        }
        return bytes;
    }

    /** Every batch CRC-checked, every record's key and value copied out. Returns the record count. */
    private static long decode(ByteBuffer data, BufferSupplier supplier) {
        long count = 0;
        long sink = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(data.duplicate()).batches()) {
            batch.ensureValid();
            try (CloseableIterator<Record> records = batch.streamingIterator(supplier)) {
                while (records.hasNext()) {
                    Record record = records.next();
                    byte[] key = record.hasKey() ? Utils.toArray(record.key()) : null;
                    byte[] value = record.hasValue() ? Utils.toArray(record.value()) : null;
                    sink += record.offset() + record.timestamp() + touch(key) + touch(value);
                    count++;
                }
            }
        }
        blackhole += sink;
        return count;
    }

    /** Reads the copy's last byte, so that the JIT cannot drop the copy. */
    private static long touch(byte[] copy) {
        return copy == null || copy.length == 0 ? 0 : copy.length + copy[copy.length - 1];
    }

    /** Decodes `data` as the timed decode does and compares every record with the input; null if equal. */
    private static String verify(Workload w, ByteBuffer data, BufferSupplier supplier) {
        try {
            return compare(w, data, supplier);
        } catch (RuntimeException e) {  // CorruptRecordException, InvalidRecordException, KafkaException
            return e.toString();
        }
    }

    private static String compare(Workload w, ByteBuffer data, BufferSupplier supplier) {
        int i = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(data.duplicate()).batches()) {
            batch.ensureValid();
            try (CloseableIterator<Record> records = batch.streamingIterator(supplier)) {
                while (records.hasNext()) {
                    Record record = records.next();
                    if (i >= w.size()) {
                        return "more records than the " + w.size() + " written";
                    }
                    byte[] key = record.hasKey() ? Utils.toArray(record.key()) : null;
                    byte[] value = record.hasValue() ? Utils.toArray(record.value()) : null;
                    if (record.offset() != i || record.timestamp() != w.timestamps()[i]
                            || !Arrays.equals(key, w.keys()[i]) || !Arrays.equals(value, w.values()[i])) {
                        return "record " + i + " differs from the input (offset " + record.offset() + ")";
                    }
                    i++;
                }
            }
        }
        return i == w.size() ? null : "decoded " + i + " records, expected " + w.size();
    }

    private static String sameBytes(byte[] ours, byte[] klake) {
        int at = Arrays.mismatch(ours, klake);
        return at < 0 ? null : String.format(Locale.ROOT,
                "kafka-clients wrote %d bytes, klake %d; first difference at byte %d", ours.length, klake.length, at);
    }

    private static ByteBuffer concat(List<ByteBuffer> buffers, long size) {
        ByteBuffer all = ByteBuffer.allocate(Math.toIntExact(size));
        for (ByteBuffer b : buffers) {
            all.put(b.duplicate());
        }
        return all.flip();
    }

    private static String json(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ");
    }
}
