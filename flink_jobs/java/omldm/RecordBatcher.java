package omldm;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.Map;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * Groups the data records bound for each spoke into one batch per crossing into Python.
 *
 * <p>Input: {@code Row(k INT, training BOOLEAN, v BYTES)}, one Kafka record each (k: the
 * spoke key, drawn upstream in SQL). Output: {@code Row(k INT, batch BYTES)}, where batch is
 * little-endian {@code int32 n}, {@code int32 length[n]}, {@code uint8 training[n]}, then
 * the n records' bytes in arrival order. A key's batch is sent when it holds
 * {@code maxRecords} records or {@code maxBytes} bytes, and every key's batch at the latest
 * {@code delayMs} milliseconds (processing time) after its first record, before each
 * checkpoint barrier (so buffered records need no state: exactly-once holds) and at the end
 * of input. Records of one key leave in the order they came.
 */
public class RecordBatcher extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<Row, Row>, BoundedOneInput, ProcessingTimeCallback {

    private static final long serialVersionUID = 1L;

    private final long delayMs;
    private final int maxRecords;
    private final int maxBytes;

    private transient Map<Integer, Batch> batches;
    private transient boolean timerSet;

    public RecordBatcher(long delayMs, int maxRecords, int maxBytes) {
        if (delayMs < 1 || maxRecords < 1 || maxBytes < 1) {
            throw new IllegalArgumentException("delayMs, maxRecords and maxBytes must be >= 1");
        }
        this.delayMs = delayMs;
        this.maxRecords = maxRecords;
        this.maxBytes = maxBytes;
    }

    private static final class Batch {
        final int key;
        final ByteArrayOutputStream body = new ByteArrayOutputStream(1 << 14);
        int[] lengths = new int[64];
        byte[] training = new byte[64];
        int n;

        Batch(int key) {
            this.key = key;
        }

        void add(boolean train, byte[] value) {
            if (n == lengths.length) {
                lengths = java.util.Arrays.copyOf(lengths, 2 * n);
                training = java.util.Arrays.copyOf(training, 2 * n);
            }
            lengths[n] = value.length;
            training[n] = (byte) (train ? 1 : 0);
            n++;
            body.write(value, 0, value.length);
        }

        byte[] drain() {
            ByteBuffer out = ByteBuffer.allocate(4 + 5 * n + body.size()).order(ByteOrder.LITTLE_ENDIAN);
            out.putInt(n);
            for (int i = 0; i < n; i++) {
                out.putInt(lengths[i]);
            }
            out.put(training, 0, n);
            out.put(body.toByteArray());
            n = 0;
            body.reset();
            return out.array();
        }
    }

    @Override
    public void open() throws Exception {
        super.open();
        batches = new HashMap<>();
        timerSet = false;
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row row = element.getValue();
        int key = (Integer) row.getField(0);
        Boolean train = (Boolean) row.getField(1);
        byte[] value = (byte[]) row.getField(2);
        if (value == null) {
            value = new byte[0];
        }
        Batch batch = batches.get(key);
        if (batch == null) {
            batch = new Batch(key);
            batches.put(key, batch);
        }
        batch.add(train == null || train, value);
        if (batch.n >= maxRecords || batch.body.size() >= maxBytes) {
            emit(batch);
        } else if (!timerSet) {
            timerSet = true;
            getProcessingTimeService().registerTimer(
                    getProcessingTimeService().getCurrentProcessingTime() + delayMs, this);
        }
    }

    private void emit(Batch batch) {
        output.collect(new StreamRecord<>(Row.of(batch.key, batch.drain())));
    }

    private void flushAll() {
        for (Batch batch : batches.values()) {
            if (batch.n > 0) {
                emit(batch);
            }
        }
    }

    @Override
    public void onProcessingTime(long time) throws Exception {
        timerSet = false;
        flushAll();
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flushAll();
    }

    @Override
    public void endInput() throws Exception {
        flushAll();
    }

    @Override
    public void finish() throws Exception {
        flushAll();
        super.finish();
    }
}
